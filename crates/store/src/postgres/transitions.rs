//! Transitions of active runs, for PostgreSQL: the daemon's reap (`starting → running`,
//! `→ terminal` with an optional retry, `starting → queued`), a batch per transaction.
//!
//! Each run is locked (`FOR UPDATE`) and then checked against the state machine and its claim
//! token, so two writers at once cannot both pass the check. A run that leaves `starting`/
//! `running` frees its cap seats in the same transaction: exactly once, since only the writer
//! that moves it out of an active status does it. The note a run's end gets is the SQLite
//! backend's `end_note`, shared, and so is the decision of the failure hook's run
//! (`hook_run`), queued in the same transaction as the failed end.

use postgres::Transaction;

use super::claim::free_seats;
use super::daemon::check_epoch;
use super::events::{insert_event, EventRow};
use super::runs::{cancel_request, get_run, insert_run};
use super::PgStore;
use crate::error::Result;
use crate::sqlite::{end_note, hook_run, CancelRequest, Ending};
use crate::{
    Applied, Change, FailureHooks, Millis, NewRun, Run, RunStatus, StoreError, Transition, Trigger,
};

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

/// Applies one transition in the caller's transaction: locks and checks the run, writes it (and
/// its retry or its failure hook's run, if any), frees its seats when it leaves the active
/// statuses, appends the event.
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
    let (requested_at, cancel_reason) = if run.cancel_requested {
        cancel_request(tx, run.id)?
    } else {
        (None, None)
    };
    let mut retry_id = None;
    let detail: Option<String>;
    match &t.change {
        Change::Running { pid } => {
            tx.execute(
                "UPDATE runs SET status = 'running', pid = $2 WHERE id = $1",
                &[&run.id, &pid.map(i64::from)],
            )?;
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
            let note = end_note(
                &Ending {
                    status: *status,
                    reason: reason.as_deref(),
                    finished_at: *finished_at,
                    retry_due: retry.is_some(),
                },
                run.cancel_requested.then_some(CancelRequest {
                    at: requested_at,
                    reason: cancel_reason.as_deref(),
                }),
            );
            let end = End {
                status: *status,
                exit_code: *exit_code,
                signal: *signal,
                note: note.as_deref(),
                at: finished_at.unwrap_or(now),
            };
            append_reason_and_end(tx, &run, &end)?;
            detail = note;
            // A cancel, once accepted, is final: no further attempt, whatever the retry policy.
            if let Some(not_before) = retry.filter(|_| !run.cancel_requested) {
                let next = NewRun {
                    project: run.project.clone(),
                    namespace: run.namespace.clone(),
                    priority: run.priority,
                    trigger: Trigger::Retry,
                    occurrence: run.occurrence,
                    not_before,
                    args: run.args.clone(),
                    env: run.env.clone(),
                    // `rerun_of` marks the run an operator's `fleet rerun` made (trigger `rerun`);
                    // its retries link to it through `retry_of` instead.
                    rerun_of: None,
                    hook_of: run.hook_of,
                };
                retry_id = Some(insert_run(tx, &next, run.attempt + 1, Some(run.id), now)?);
            }
        }
        Change::Requeue { .. } if cancelled_before_start => {
            let note = match &cancel_reason {
                Some(words) => format!("{words}, before it started"),
                None => "cancelled before it started".to_string(),
            };
            let end = End {
                status: RunStatus::Cancelled,
                exit_code: None,
                signal: None,
                note: Some(&note),
                at: now,
            };
            append_reason_and_end(tx, &run, &end)?;
            tx.execute("UPDATE runs SET pid = NULL WHERE id = $1", &[&run.id])?;
            detail = Some(note);
        }
        Change::Requeue { reason } => {
            tx.execute(
                "UPDATE runs SET status = 'queued', started_at = NULL, pid = NULL WHERE id = $1",
                &[&run.id],
            )?;
            detail = Some(reason.clone());
        }
    }
    if run.status.is_active() && !to.is_active() {
        free_seats(tx, run.id)?;
    }
    let after = get_run(tx, run.id, false)?.ok_or(StoreError::UnknownRun(run.id))?;
    insert_event(
        tx,
        &EventRow {
            run: &after,
            from: Some(run.status),
            epoch: Some(epoch),
            at: now,
            occupancy: None,
            detail: detail.as_deref(),
        },
    )?;
    // After the end's own event, so that the history reads in order: the end, then its hook.
    let hook_id = match hook_run(&after, hooks) {
        Some(new) if retry_id.is_none() && matches!(t.change, Change::Finish { .. }) => {
            Some(insert_run(tx, &new, 1, None, now)?)
        }
        _ => None,
    };
    Ok(Applied::Done {
        status: to,
        retry: retry_id,
        hook: hook_id,
        run: Box::new(after),
    })
}

/// A run's end as written.
struct End<'a> {
    /// The terminal status.
    status: RunStatus,
    /// The command's exit code, if it exited.
    exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    signal: Option<i32>,
    /// Appended to the run's `reason` (a note written when the run was made is kept).
    note: Option<&'a str>,
    /// When it ended (ms UTC).
    at: Millis,
}

/// Writes a run's end: status, exit code, signal, instant, and the note appended to `reason`.
fn append_reason_and_end(tx: &mut Transaction<'_>, run: &Run, end: &End<'_>) -> Result<()> {
    tx.execute(
        "UPDATE runs SET status = $2, exit_code = $3, signal = $4, \
           reason = CASE WHEN $5::text IS NULL THEN reason WHEN reason IS NULL THEN $5::text \
                         ELSE reason || '; ' || $5::text END, \
           finished_at = $6 WHERE id = $1",
        &[
            &run.id,
            &end.status.as_str(),
            &end.exit_code.map(i64::from),
            &end.signal.map(i64::from),
            &end.note,
            &end.at,
        ],
    )?;
    Ok(())
}
