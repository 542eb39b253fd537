//! Transitions of active runs: the daemon's reap (`starting → running`, `→ terminal` with an
//! optional retry, `starting → queued`), a batch per transaction.
//!
//! Each transition is checked against the state machine ([`crate::status`]) and the run's
//! current claim token before anything is written: a transition for an older claim, or for a
//! run already past it, is skipped, never applied. Nothing here may move a run the state
//! machine does not allow.

use rusqlite::{params, Connection, TransactionBehavior};

use super::daemon::check_epoch;
use super::events::{insert_event, EventRow};
use super::runs::{get_run, insert_run};
use super::SqliteStore;
use crate::error::Result;
use crate::{Applied, Change, Millis, NewRun, RunStatus, StoreError, Transition, Trigger};

impl SqliteStore {
    /// Applies transitions in one `BEGIN IMMEDIATE` transaction, after the epoch check; one
    /// [`Applied`] per transition, in order.
    pub(crate) fn apply(
        &self,
        epoch: i64,
        transitions: &[Transition],
        now: Millis,
    ) -> Result<Vec<Applied>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_epoch(&tx, epoch)?;
        let mut out = Vec::with_capacity(transitions.len());
        for t in transitions {
            out.push(apply_one(&tx, epoch, t, now)?);
        }
        tx.commit()?;
        Ok(out)
    }
}

/// Applies one transition on the caller's transaction: checks it, writes the run (and its
/// retry, if any) and appends the event.
fn apply_one(conn: &Connection, epoch: i64, t: &Transition, now: Millis) -> Result<Applied> {
    let Some(run) = get_run(conn, t.run_id)? else {
        return Err(StoreError::UnknownRun(t.run_id));
    };
    if run.claim_token != t.token {
        return Ok(Applied::Skipped(format!(
            "run {} is at claim {}, the transition is for claim {}",
            run.id, run.claim_token, t.token
        )));
    }
    let cancelled_before_start = matches!(t.change, Change::Requeue { .. }) && run.cancel_requested;
    let to = match &t.change {
        Change::Running { .. } => RunStatus::Running,
        Change::Finish { status, .. } => *status,
        Change::Requeue { .. } if cancelled_before_start => RunStatus::Cancelled,
        Change::Requeue { .. } => RunStatus::Queued,
    };
    if !run.status.can_become(to) {
        if run.status == to || run.status.is_terminal() {
            return Ok(Applied::Skipped(format!(
                "run {} is already {}",
                run.id, run.status
            )));
        }
        return Err(StoreError::IllegalTransition {
            run: run.id,
            from: run.status,
            to,
        });
    }
    if matches!(t.change, Change::Finish { .. }) && !to.is_terminal() {
        return Err(StoreError::IllegalTransition {
            run: run.id,
            from: run.status,
            to,
        });
    }
    let mut retry_id = None;
    let detail: Option<String>;
    match &t.change {
        Change::Running { pid } => {
            conn.prepare_cached("UPDATE runs SET status = 'running', pid = ?2 WHERE id = ?1")?
                .execute(params![run.id, pid])?;
            detail = pid.map(|p| format!("pid {p}"));
        }
        Change::Finish {
            status,
            exit_code,
            signal,
            reason,
            retry,
            finished_at,
        } => {
            conn.prepare_cached(
                // A note written when the run was made (skipped occurrences before it) is kept.
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
                reason,
                finished_at.unwrap_or(now)
            ])?;
            detail = reason.clone();
            if let Some(not_before) = retry {
                let next = NewRun {
                    project: run.project.clone(),
                    namespace: run.namespace.clone(),
                    priority: run.priority,
                    trigger: Trigger::Retry,
                    occurrence: run.occurrence,
                    not_before: *not_before,
                };
                retry_id = Some(insert_run(conn, &next, run.attempt + 1, Some(run.id), now)?);
            }
        }
        Change::Requeue { .. } if cancelled_before_start => {
            let reason = "cancelled before it started";
            conn.prepare_cached(
                "UPDATE runs SET status = 'cancelled', reason = ?2, finished_at = ?3, pid = NULL WHERE id = ?1",
            )?
            .execute(params![run.id, reason, now])?;
            detail = Some(reason.to_string());
        }
        Change::Requeue { reason } => {
            conn.prepare_cached(
                "UPDATE runs SET status = 'queued', started_at = NULL, pid = NULL WHERE id = ?1",
            )?
            .execute([run.id])?;
            detail = Some(reason.clone());
        }
    }
    let after = get_run(conn, run.id)?.ok_or(StoreError::UnknownRun(run.id))?;
    insert_event(
        conn,
        &EventRow {
            run: &after,
            from: Some(run.status),
            epoch: Some(epoch),
            at: now,
            occupancy: None,
            detail: detail.as_deref(),
        },
    )?;
    Ok(Applied::Done {
        status: to,
        retry: retry_id,
    })
}
