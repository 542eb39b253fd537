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
use crate::decide::transition::{plan_transition, CancelRequest, Decision, RunWrite};
use crate::error::Result;
use crate::{Applied, FailureHooks, Millis, StoreError, Transition};

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
/// and writes what [`plan_transition`] decides.
fn apply_one(
    conn: &Connection,
    epoch: i64,
    t: &Transition,
    hooks: &FailureHooks,
    now: Millis,
) -> Result<Applied> {
    let Some(run) = get_run(conn, t.run_id)? else {
        return Err(StoreError::UnknownRun(t.run_id));
    };
    let (cancel_at, cancel_reason) = if run.cancel_requested && run.claim_token == t.token {
        cancel_request(conn, run.id)?
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
            conn.prepare_cached("UPDATE runs SET status = 'running', pid = ?2 WHERE id = ?1")?
                .execute(params![run.id, pid])?;
        }
        RunWrite::End {
            status,
            exit_code,
            signal,
            note,
            at,
            clear_pid,
        } => {
            conn.prepare_cached(
                "UPDATE runs SET status = ?2, exit_code = ?3, signal = ?4, \
                   reason = CASE WHEN ?5 IS NULL THEN reason WHEN reason IS NULL THEN ?5 \
                                 ELSE reason || '; ' || ?5 END, \
                   finished_at = ?6 WHERE id = ?1",
            )?
            .execute(params![
                run.id,
                status.as_str(),
                exit_code,
                signal,
                note,
                at
            ])?;
            if *clear_pid {
                conn.prepare_cached("UPDATE runs SET pid = NULL WHERE id = ?1")?
                    .execute([run.id])?;
            }
        }
        RunWrite::Requeue => {
            conn.prepare_cached(
                "UPDATE runs SET status = 'queued', started_at = NULL, pid = NULL WHERE id = ?1",
            )?
            .execute([run.id])?;
        }
    }
    let retry_id = match &plan.retry {
        Some(r) => Some(insert_run(conn, &r.run, r.attempt, Some(r.retry_of), now)?),
        None => None,
    };
    // SQLite's seats live on the run rows themselves: leaving an active status frees them.
    let after = get_run(conn, run.id)?.ok_or(StoreError::UnknownRun(run.id))?;
    insert_event(
        conn,
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
        Some(new) => Some(insert_run(conn, new, 1, None, now)?),
        None => None,
    };
    Ok(Applied::Done {
        status: plan.to,
        retry: retry_id,
        hook: hook_id,
        run: Box::new(after),
    })
}
