//! Transitions of active runs, for PostgreSQL: the daemon's reap (`starting → running`,
//! `→ terminal` with an optional retry, `starting → queued`), a batch per transaction.
//!
//! What a transition writes is decided by [`crate::decide::transition`], the same rule as on
//! SQLite; this file executes its plan. Each run is locked (`FOR UPDATE`) before it is read for
//! the decision, so two writers at once cannot both pass the check. A run that leaves
//! `starting`/`running` frees its cap seats in the same transaction: exactly once, since only
//! the writer that moves it out of an active status does it.

use postgres::Transaction;

use super::claim::free_seats;
use super::daemon::check_epoch;
use super::events::{insert_event, EventRow};
use super::runs::{cancel_request, get_run, insert_run};
use super::PgStore;
use crate::decide::transition::{apply, written, RunWrite, TransitionWrites};
use crate::error::Result;
use crate::{Applied, FailureHooks, Millis, NewRun, Run, RunId, RunStatus, StoreError, Transition};

impl PgStore {
    /// Applies transitions in one transaction, after the epoch check; one [`Applied`] per
    /// transition, in order. `hooks`: the failure hooks in force, by project.
    pub(crate) fn apply(
        &self,
        epoch: i64,
        transitions: &[Transition],
        hooks: &FailureHooks,
        now: Millis,
    ) -> Result<Vec<Applied>> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        check_epoch(&mut tx, epoch)?;
        let mut out = Vec::with_capacity(transitions.len());
        for t in transitions {
            out.push(apply_one(&mut tx, epoch, t, hooks, now)?);
        }
        tx.commit()?;
        Ok(out)
    }
}

/// Applies one transition in the caller's transaction: locks and reads the run and its cancel
/// request, and applies it
/// ([`crate::decide::transition::apply`]: the cancel request, the decision, the writes).
pub(super) fn apply_one(
    tx: &mut Transaction<'_>,
    epoch: i64,
    t: &Transition,
    hooks: &FailureHooks,
    now: Millis,
) -> Result<Applied> {
    let Some(run) = get_run(tx, t.run_id, true)? else {
        return Ok(crate::decide::transition::skip_for_a_missing_row(t));
    };
    apply(&mut Writes { tx, epoch, now }, &run, t, hooks, now)
}

/// A transition's writes on PostgreSQL, on the caller's transaction (the run is locked).
struct Writes<'a, 't> {
    tx: &'a mut Transaction<'t>,
    epoch: i64,
    now: Millis,
}

impl TransitionWrites for Writes<'_, '_> {
    fn cancel_request(&mut self, id: RunId) -> Result<(Option<Millis>, Option<String>)> {
        cancel_request(self.tx, id)
    }

    fn write_run(&mut self, id: RunId, w: &RunWrite) -> Result<()> {
        match w {
            RunWrite::Running { pid } => {
                let n = self.tx.execute(
                    "UPDATE runs SET status = 'running', pid = $2 WHERE id = $1",
                    &[&id, &pid.map(i64::from)],
                )?;
                written(n, id, RunStatus::Running)?;
            }
            RunWrite::End {
                status,
                exit_code,
                signal,
                note,
                at,
                clear_pid,
            } => {
                let n = self.tx.execute(
                    "UPDATE runs SET status = $2, exit_code = $3, signal = $4, \
                       reason = CASE WHEN $5::text IS NULL THEN reason \
                                     WHEN reason IS NULL THEN $5::text \
                                     ELSE reason || '; ' || $5::text END, \
                       finished_at = $6 WHERE id = $1",
                    &[
                        &id,
                        &status.as_str(),
                        &exit_code.map(i64::from),
                        &signal.map(i64::from),
                        note,
                        at,
                    ],
                )?;
                written(n, id, *status)?;
                if *clear_pid {
                    self.tx
                        .execute("UPDATE runs SET pid = NULL WHERE id = $1", &[&id])?;
                }
            }
            RunWrite::Requeue => {
                let n = self.tx.execute(
                    "UPDATE runs SET status = 'queued', started_at = NULL, pid = NULL WHERE id = $1",
                    &[&id],
                )?;
                written(n, id, RunStatus::Queued)?;
            }
        }
        Ok(())
    }

    fn insert_run(&mut self, new: &NewRun, attempt: u32, retry_of: Option<RunId>) -> Result<RunId> {
        insert_run(self.tx, new, attempt, retry_of, self.now)
    }

    fn free_seats(&mut self, id: RunId) -> Result<()> {
        free_seats(self.tx, id)
    }

    fn reread(&mut self, id: RunId) -> Result<Run> {
        get_run(self.tx, id, false)?.ok_or(StoreError::UnknownRun(id))
    }

    fn insert_event(&mut self, after: &Run, from: RunStatus, detail: Option<&str>) -> Result<()> {
        insert_event(
            self.tx,
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
