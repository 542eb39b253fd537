//! Transitions of active runs, for SQLite: the daemon's reap (`starting → running`,
//! `→ terminal` with an optional retry, `starting → queued`), a batch per transaction.
//!
//! What a transition writes is decided by [`crate::decide::transition`] (the state machine and
//! claim-token check, the cancel request, the end's note, the retry and the failure hook's
//! run); this file reads what that decision needs and executes its plan, all in one
//! `BEGIN IMMEDIATE` transaction, so a `fleet cancel` cannot slip in between the read of the
//! cancel flag and the write of the end.

use rusqlite::{params, Connection, TransactionBehavior};

use super::daemon::check_epoch;
use super::events::{insert_event, EventRow};
use super::runs::{cancel_request, get_run, insert_run};
use super::SqliteStore;
use crate::decide::transition::{apply, written, RunWrite, TransitionWrites};
use crate::error::Result;
use crate::{Applied, FailureHooks, Millis, NewRun, Run, RunId, RunStatus, StoreError, Transition};

impl SqliteStore {
    /// Applies transitions in one `BEGIN IMMEDIATE` transaction, after the epoch check; one
    /// [`Applied`] per transition, in order. `hooks`: the failure hooks in force, by project.
    pub(crate) fn apply(
        &self,
        epoch: i64,
        transitions: &[Transition],
        hooks: &FailureHooks,
        now: Millis,
    ) -> Result<Vec<Applied>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_epoch(&tx, epoch)?;
        let mut out = Vec::with_capacity(transitions.len());
        for t in transitions {
            out.push(apply_one(&tx, epoch, t, hooks, now)?);
        }
        tx.commit()?;
        Ok(out)
    }
}

/// Applies one transition on the caller's transaction: reads the run and its cancel request,
/// and applies it
/// ([`crate::decide::transition::apply`]: the cancel request, the decision, the writes).
pub(super) fn apply_one(
    conn: &Connection,
    epoch: i64,
    t: &Transition,
    hooks: &FailureHooks,
    now: Millis,
) -> Result<Applied> {
    let Some(run) = get_run(conn, t.run_id)? else {
        return Ok(crate::decide::transition::skip_for_a_missing_row(t));
    };
    apply(&mut Writes { conn, epoch, now }, &run, t, hooks, now)
}

/// A transition's writes on SQLite, on the caller's `BEGIN IMMEDIATE` transaction.
struct Writes<'c> {
    conn: &'c Connection,
    epoch: i64,
    now: Millis,
}

impl TransitionWrites for Writes<'_> {
    fn cancel_request(&mut self, id: RunId) -> Result<(Option<Millis>, Option<String>)> {
        cancel_request(self.conn, id)
    }

    fn write_run(&mut self, id: RunId, w: &RunWrite) -> Result<()> {
        match w {
            RunWrite::Running { pid } => {
                let n = self
                    .conn
                    .prepare_cached("UPDATE runs SET status = 'running', pid = ?2 WHERE id = ?1")?
                    .execute(params![id, pid])?;
                written(n as u64, id, RunStatus::Running)?;
            }
            RunWrite::End {
                status,
                exit_code,
                signal,
                note,
                at,
                clear_pid,
            } => {
                let n = self
                    .conn
                    .prepare_cached(
                        "UPDATE runs SET status = ?2, exit_code = ?3, signal = ?4, \
                           reason = CASE WHEN ?5 IS NULL THEN reason WHEN reason IS NULL THEN ?5 \
                                         ELSE reason || '; ' || ?5 END, \
                           finished_at = ?6 WHERE id = ?1",
                    )?
                    .execute(params![id, status.as_str(), exit_code, signal, note, at])?;
                written(n as u64, id, *status)?;
                if *clear_pid {
                    self.conn
                        .prepare_cached("UPDATE runs SET pid = NULL WHERE id = ?1")?
                        .execute([id])?;
                }
            }
            RunWrite::Requeue => {
                let n = self
                    .conn
                    .prepare_cached(
                        "UPDATE runs SET status = 'queued', started_at = NULL, pid = NULL WHERE id = ?1",
                    )?
                    .execute([id])?;
                written(n as u64, id, RunStatus::Queued)?;
            }
        }
        Ok(())
    }

    fn insert_run(&mut self, new: &NewRun, attempt: u32, retry_of: Option<RunId>) -> Result<RunId> {
        insert_run(self.conn, new, attempt, retry_of, self.now)
    }

    /// SQLite's seats live on the run rows themselves: leaving an active status frees them.
    fn free_seats(&mut self, _: RunId) -> Result<()> {
        Ok(())
    }

    fn reread(&mut self, id: RunId) -> Result<Run> {
        get_run(self.conn, id)?.ok_or(StoreError::UnknownRun(id))
    }

    fn insert_event(&mut self, after: &Run, from: RunStatus, detail: Option<&str>) -> Result<()> {
        insert_event(
            self.conn,
            &EventRow {
                run: after,
                from: Some(from),
                epoch: Some(self.epoch),
                at: self.now,
                occupancy: None,
                detail,
            },
        )
    }
}
