//! The operator's reads and writes over several runs, for PostgreSQL: the next attempt of a run
//! (what `fleet wait` follows) and the bulk cancel. Every write appends its events in the same
//! transaction, and none changes an active run's status (a cancel of an active run is a
//! request).

use super::runs::{run_from_row, RunTx, RUN_COLUMNS};
use super::PgStore;
use crate::decide::cancel::{
    cancel_run, selected_status, selected_statuses, selection as selection_of,
};
use crate::error::Result;
use crate::{BulkCancelled, CancelSelection, Millis, Run, RunId};

impl PgStore {
    /// [`crate::Store::next_attempt`]: one seek in `runs_by_project (project, id)`, as on
    /// SQLite.
    pub(crate) fn next_attempt(&self, run: &Run) -> Result<Option<Run>> {
        let mut conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE project = $1 AND id > $2 AND retry_of = $2 \
             ORDER BY id LIMIT 1"
        );
        conn.query_opt(&sql, &[&run.project, &run.id])?
            .as_ref()
            .map(run_from_row)
            .transpose()
    }

    /// [`crate::Store::cancel_selected`]: the selection is read and locked (`FOR UPDATE`, in id
    /// order) and every run written in one transaction, so no claim, end or other cancel slips
    /// in between (a claim skips a run locked here; a run claimed before is read as active).
    pub(crate) fn cancel_selected(
        &self,
        selection: &CancelSelection,
        queued_only: bool,
        reason: &str,
        now: Millis,
    ) -> Result<Vec<BulkCancelled>> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        let (column, value) = selection_of(selection);
        let statuses = selected_statuses(queued_only);
        // `column` is one of two fixed names (`selection_of`), never input.
        let sql = format!(
            "SELECT id, status, project FROM runs WHERE status IN {statuses} \
             AND ($1::text IS NULL OR {column} = $1::text) ORDER BY id FOR UPDATE"
        );
        let selected: Vec<(RunId, String, String)> = tx
            .query(&sql, &[&value])?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect::<Result<_>>()?;
        let mut out = Vec::with_capacity(selected.len());
        for (id, status, project) in selected {
            let status = selected_status(&status);
            let Some(outcome) = cancel_run(&mut RunTx(&mut tx), id, status, reason, now)? else {
                continue;
            };
            out.push(BulkCancelled {
                run_id: id,
                project,
                outcome,
            });
        }
        tx.commit()?;
        Ok(out)
    }
}
