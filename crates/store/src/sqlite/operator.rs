//! The operator's reads and writes over several runs: the next attempt of a run (what `fleet
//! wait` follows) and the bulk cancel. Every write appends its events in the same transaction,
//! and none changes an active run's status (a cancel of an active run is a request).

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::runs::{get_run, run_from_row, RunTx, RUN_COLUMNS};
use super::SqliteStore;
use crate::decide::cancel::{
    cancel_run, selected_status, selected_statuses, selection as selection_of,
};
use crate::error::Result;
use crate::{BulkCancelled, CancelSelection, Millis, Run, RunId, StoreError};

impl SqliteStore {
    /// [`crate::Store::next_attempt`]: a retry always has a larger id than the run it retries
    /// and the same project, so the seek stays in `runs_by_project (project, id)`.
    pub(crate) fn next_attempt(&self, run: &Run) -> Result<Option<Run>> {
        let conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE project = ?1 AND id > ?2 AND retry_of = ?2 \
             ORDER BY id LIMIT 1"
        );
        let next = conn
            .prepare_cached(&sql)?
            .query_row(params![run.project, run.id], run_from_row)
            .optional()?;
        next.transpose()
    }

    /// [`crate::Store::cancel_selected`]: the selection is read and every run written in one
    /// `BEGIN IMMEDIATE` transaction, so no claim slips in between.
    pub(crate) fn cancel_selected(
        &self,
        selection: &CancelSelection,
        queued_only: bool,
        reason: &str,
        now: Millis,
    ) -> Result<Vec<BulkCancelled>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (column, value) = selection_of(selection);
        let statuses = selected_statuses(queued_only);
        // `column` is one of two fixed names (`selection_of`), never input.
        let sql = format!(
            "SELECT id, status FROM runs WHERE status IN {statuses} \
             AND (?1 IS NULL OR {column} = ?1) ORDER BY id"
        );
        let selected: Vec<(RunId, String)> = {
            let mut stmt = tx.prepare(&sql)?;
            let rows = stmt.query_map([value], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let mut out = Vec::with_capacity(selected.len());
        for (id, status) in selected {
            let status = selected_status(&status);
            let Some(outcome) = cancel_run(&mut RunTx(&tx), id, status, reason, now)? else {
                continue;
            };
            let run = get_run(&tx, id)?.ok_or(StoreError::UnknownRun(id))?;
            out.push(BulkCancelled {
                run_id: id,
                project: run.project,
                outcome,
            });
        }
        tx.commit()?;
        Ok(out)
    }
}
