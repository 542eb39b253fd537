//! The operator's reads and writes over several runs: the next attempt of a run (what `fleet
//! wait` follows) and the bulk cancel. Every write appends its events in the same transaction,
//! and none changes an active run's status (a cancel of an active run is a request).

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::runs::{cancel_if_queued, get_run, request_stop, run_from_row, RUN_COLUMNS};
use super::SqliteStore;
use crate::error::Result;
use crate::{BulkCancelled, CancelOutcome, CancelSelection, Millis, Run, RunId, StoreError};

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
        let (column, value) = match selection {
            CancelSelection::Project(p) => ("project", Some(p.as_str())),
            CancelSelection::Namespace(n) => ("namespace", Some(n.as_str())),
            CancelSelection::All => ("project", None),
        };
        let statuses = if queued_only {
            "('queued')"
        } else {
            "('queued', 'starting', 'running')"
        };
        // `column` is one of two fixed names chosen above, never input.
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
            let outcome = if status == "queued" {
                if !cancel_if_queued(&tx, id, reason, now)? {
                    continue;
                }
                CancelOutcome::Cancelled
            } else {
                request_stop(&tx, id, reason, now)?;
                CancelOutcome::Requested
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
