//! Transitions of active runs: the daemon's reap (`starting → running`, `→ terminal` with an
//! optional retry, `starting → queued`), a batch per transaction.
//!
//! Each transition is checked against the state machine ([`crate::status`]) and the run's
//! current claim token before anything is written: a transition for an older claim, or for a
//! run already past it, is skipped, never applied. Nothing here may move a run the state
//! machine does not allow.
//!
//! A run's end is also where its cancel request is settled, in the same transaction that reads
//! the flag (so a `fleet cancel` cannot slip in between): once a cancel was accepted no retry is
//! queued, whatever the caller's retry policy asked, and the note says what really happened
//! ([`end_note`]) — the status itself is always the one the run files call for.
//!
//! A failed end with no retry queued also queues the project's failure hook, if any, in the
//! same transaction ([`super::hooks`]).

use rusqlite::{params, Connection, TransactionBehavior};

use super::daemon::check_epoch;
use super::events::{insert_event, EventRow};
use super::hooks::queue_hook;
use super::runs::{cancel_request, get_run, insert_run};
use super::SqliteStore;
use crate::error::Result;
use crate::{
    Applied, Change, FailureHooks, Millis, NewRun, Run, RunStatus, StoreError, Transition, Trigger,
};

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

/// Applies one transition on the caller's transaction: checks it, writes the run (and its
/// retry or its failure hook's run, if any) and appends the event.
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
        cancel_request(conn, run.id)?
    } else {
        (None, None)
    };
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
            append_reason_and_end(
                conn,
                &run,
                *status,
                *exit_code,
                *signal,
                note.as_deref(),
                finished_at.unwrap_or(now),
            )?;
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
                    // A retry runs what the failed attempt ran, and reports what it reported.
                    args: run.args.clone(),
                    env: run.env.clone(),
                    // `rerun_of` marks the run an operator's `fleet rerun` made (trigger `rerun`);
                    // its retries link to it through `retry_of` instead.
                    rerun_of: None,
                    hook_of: run.hook_of,
                };
                retry_id = Some(insert_run(conn, &next, run.attempt + 1, Some(run.id), now)?);
            }
        }
        Change::Requeue { .. } if cancelled_before_start => {
            let note = match &cancel_reason {
                Some(words) => format!("{words}, before it started"),
                None => "cancelled before it started".to_string(),
            };
            append_reason_and_end(
                conn,
                &run,
                RunStatus::Cancelled,
                None,
                None,
                Some(&note),
                now,
            )?;
            conn.prepare_cached("UPDATE runs SET pid = NULL WHERE id = ?1")?
                .execute([run.id])?;
            detail = Some(note);
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
    // After the end's own event, so that the history reads in order: the end, then its hook.
    let hook_id = if retry_id.is_none() && matches!(t.change, Change::Finish { .. }) {
        queue_hook(conn, &after, hooks, now)?
    } else {
        None
    };
    Ok(Applied::Done {
        status: to,
        retry: retry_id,
        hook: hook_id,
        run: Box::new(after),
    })
}

/// Writes a run's end: its terminal `status`, exit code, signal and instant, and `note` appended
/// to its `reason` (a note written when the run was made, such as missed occurrences, is kept).
fn append_reason_and_end(
    conn: &Connection,
    run: &Run,
    status: RunStatus,
    exit_code: Option<i32>,
    signal: Option<i32>,
    note: Option<&str>,
    finished_at: Millis,
) -> Result<()> {
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
        finished_at
    ])?;
    Ok(())
}

/// How a run ended, as its transition says.
pub(crate) struct Ending<'a> {
    /// The terminal status the run files call for.
    pub(crate) status: RunStatus,
    /// The words that come with that status (a spawn error, "timeout expired", …).
    pub(crate) reason: Option<&'a str>,
    /// When the command ended, if its shim recorded it (milliseconds since the epoch, UTC).
    pub(crate) finished_at: Option<Millis>,
    /// The retry policy asked for another attempt.
    pub(crate) retry_due: bool,
}

/// A cancel that was requested for the run.
pub(crate) struct CancelRequest<'a> {
    /// When it was first requested; `None` if recorded before the database kept it.
    pub(crate) at: Option<Millis>,
    /// Its words ("cancelled by operator", "replaced by …"); `None` likewise (they are then
    /// in the run's `reason` already).
    pub(crate) reason: Option<&'a str>,
}

/// The note a run's end adds to its `reason`, so that status, note and retries tell one story:
/// - stopped by fleet's cancel (`cancelled`): the request's words;
/// - `cancelled` with no request: a termination signal from outside fleet stopped it, and the
///   note says so rather than pass it off as an operator's cancel;
/// - ended otherwise although a cancel was requested: the real status stays, and the note says
///   the cancel came after the end, or too late to stop it — and that no retry follows.
pub(crate) fn end_note(end: &Ending<'_>, cancel: Option<CancelRequest<'_>>) -> Option<String> {
    let cancel_part = match (end.status, cancel) {
        (RunStatus::Cancelled, Some(c)) => c.reason.map(str::to_string),
        (RunStatus::Cancelled, None) => {
            Some("stopped by a termination signal not sent by fleet".to_string())
        }
        (_, None) => None,
        (status, Some(c)) => {
            let mut part = if status == RunStatus::Lost {
                "cancel requested before its end was known".to_string()
            } else if matches!((end.finished_at, c.at), (Some(ended), Some(asked)) if ended <= asked)
            {
                "cancel requested after it ended".to_string()
            } else {
                "cancel requested while it ran, but it ended before the cancel reached it"
                    .to_string()
            };
            if end.retry_due {
                part += "; no retry after a cancel";
            }
            Some(part)
        }
    };
    match (end.reason, cancel_part) {
        (Some(r), Some(c)) => Some(format!("{r}; {c}")),
        (r, c) => c.or(r.map(str::to_string)),
    }
}
