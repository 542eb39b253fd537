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
use crate::decide::transition::{plan_transition, CancelRequest, Decision, RunWrite};
use crate::error::Result;
use crate::{Applied, FailureHooks, Millis, StoreError, Transition};

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
/// request, and writes what [`plan_transition`] decides.
fn apply_one(
    tx: &mut Transaction<'_>,
    epoch: i64,
    t: &Transition,
    hooks: &FailureHooks,
    now: Millis,
) -> Result<Applied> {
    let Some(run) = get_run(tx, t.run_id, true)? else {
        return Err(StoreError::UnknownRun(t.run_id));
    };
    let (cancel_at, cancel_reason) = if run.cancel_requested && run.claim_token == t.token {
        cancel_request(tx, run.id)?
    } else {
        (None, None)
    };
    let cancel = CancelRequest {
        at: cancel_at,
        reason: cancel_reason.as_deref(),
    };
    let plan = match plan_transition(&run, t, Some(cancel), hooks, now)? {
        Decision::Skip(why) => return Ok(Applied::Skipped(why)),
        Decision::Apply(plan) => plan,
    };
    match &plan.write {
        RunWrite::Running { pid } => {
            tx.execute(
                "UPDATE runs SET status = 'running', pid = $2 WHERE id = $1",
                &[&run.id, &pid.map(i64::from)],
            )?;
        }
        RunWrite::End {
            status,
            exit_code,
            signal,
            note,
            at,
            clear_pid,
        } => {
            tx.execute(
                "UPDATE runs SET status = $2, exit_code = $3, signal = $4, \
                   reason = CASE WHEN $5::text IS NULL THEN reason WHEN reason IS NULL THEN $5::text \
                                 ELSE reason || '; ' || $5::text END, \
                   finished_at = $6 WHERE id = $1",
                &[
                    &run.id,
                    &status.as_str(),
                    &exit_code.map(i64::from),
                    &signal.map(i64::from),
                    note,
                    at,
                ],
            )?;
            if *clear_pid {
                tx.execute("UPDATE runs SET pid = NULL WHERE id = $1", &[&run.id])?;
            }
        }
        RunWrite::Requeue => {
            tx.execute(
                "UPDATE runs SET status = 'queued', started_at = NULL, pid = NULL WHERE id = $1",
                &[&run.id],
            )?;
        }
    }
    let retry_id = match &plan.retry {
        Some(r) => Some(insert_run(tx, &r.run, r.attempt, Some(r.retry_of), now)?),
        None => None,
    };
    if plan.frees_seats {
        free_seats(tx, run.id)?;
    }
    let after = get_run(tx, run.id, false)?.ok_or(StoreError::UnknownRun(run.id))?;
    insert_event(
        tx,
        &EventRow {
            run: &after,
            from: Some(plan.from),
            epoch: Some(epoch),
            at: now,
            occupancy: None,
            detail: plan.detail.as_deref(),
        },
    )?;
    // After the end's own event, so that the history reads in order: the end, then its hook.
    let hook_id = match &plan.hook {
        Some(new) => Some(insert_run(tx, new, 1, None, now)?),
        None => None,
    };
    Ok(Applied::Done {
        status: plan.to,
        retry: retry_id,
        hook: hook_id,
        run: Box::new(after),
    })
}
