//! What applying one [`Transition`] to a run writes: the check against the state machine and
//! the claim token, the settling of a cancel request, the run's new status and fields, the note
//! its end gets, and whether a retry run or a failure hook's run is queued (and what it looks
//! like).
//!
//! Pure: the backend reads the run (locked, where its database needs that) and its cancel
//! request in the transaction that will write the plan, and executes [`TransitionPlan`] there.
//! It must never decide anything here from a clock or a second read: a plan made from one read
//! and written in another transaction would let a `fleet cancel` slip in between.

use crate::error::Result;
use crate::{
    Applied, Change, FailureHooks, Millis, NewRun, Run, RunId, RunStatus, StoreError, Transition,
    Trigger,
};

/// What one transition comes to: nothing, or the writes of a [`TransitionPlan`].
#[derive(Debug, PartialEq)]
pub(crate) enum Decision {
    /// Nothing is written; the words say why (an older claim, a run already past it). Not an
    /// error: a stale report is normal after a restart or a take-over.
    Skip(String),
    /// The writes to make, in the order [`TransitionPlan`] documents.
    Apply(Box<TransitionPlan>),
}

/// The writes of one accepted transition. A backend writes, in this order, in one transaction:
/// [`Self::write`], then [`Self::retry`]'s run, then frees the run's seats when
/// [`Self::frees_seats`] (backends that keep seats in rows of their own), then the run's event
/// (from [`Self::from`], with [`Self::detail`]), and last [`Self::hook`]'s run — so that the
/// history reads in order: the end, then its hook.
#[derive(Debug, PartialEq)]
pub(crate) struct TransitionPlan {
    /// The run's status before.
    pub(crate) from: RunStatus,
    /// The run's status after.
    pub(crate) to: RunStatus,
    /// What to write on the run's row.
    pub(crate) write: RunWrite,
    /// The event's words.
    pub(crate) detail: Option<String>,
    /// The next attempt to insert, if any.
    pub(crate) retry: Option<RetryRun>,
    /// The failure hook's run to insert (attempt 1, no `retry_of`), if any.
    pub(crate) hook: Option<NewRun>,
    /// The run leaves `starting`/`running`: the seats it held are free now. Only the writer
    /// that moves it out of an active status frees them, so they are freed exactly once.
    pub(crate) frees_seats: bool,
}

/// The write on the run's own row.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RunWrite {
    /// `status = 'running'` and the command's pid.
    Running {
        /// The command's pid (process group id), if the shim reported one.
        pid: Option<i32>,
    },
    /// The run's end: terminal `status`, exit code, signal, `finished_at = at`, and `note`
    /// appended to its `reason` after `"; "` (a note written when the run was made, such as
    /// missed occurrences, is kept).
    End {
        /// The terminal status.
        status: RunStatus,
        /// The command's exit code, if it exited.
        exit_code: Option<i32>,
        /// The signal that ended it, if one did.
        signal: Option<i32>,
        /// Appended to `reason`; `None` leaves it as it is.
        note: Option<String>,
        /// When it ended (ms UTC).
        at: Millis,
        /// Also clear the pid (a run cancelled before it started has none worth keeping).
        clear_pid: bool,
    },
    /// Back to `queued`: `started_at` and `pid` cleared, same attempt.
    Requeue,
}

/// The next attempt a failed end queues.
#[derive(Debug, PartialEq)]
pub(crate) struct RetryRun {
    /// The run to insert.
    pub(crate) run: NewRun,
    /// Its attempt number: the failed one's plus one.
    pub(crate) attempt: u32,
    /// The attempt it retries (`retry_of`).
    pub(crate) retry_of: RunId,
}

/// A cancel that was requested for the run, as the backend read it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CancelRequest<'a> {
    /// When it was first requested; `None` if recorded before the database kept it.
    pub(crate) at: Option<Millis>,
    /// Its words ("cancelled by operator", "replaced by …"); `None` likewise (they are then
    /// in the run's `reason` already).
    pub(crate) reason: Option<&'a str>,
}

/// What a transition reports, in words: "start", "end (failed, exit code 1)", "requeue".
fn reported(change: &Change) -> String {
    match change {
        Change::Running { .. } => "start".into(),
        Change::Finish {
            status,
            exit_code: Some(code),
            ..
        } => format!("end ({status}, exit code {code})"),
        Change::Finish {
            status,
            signal: Some(signal),
            ..
        } => format!("end ({status}, signal {signal})"),
        Change::Finish { status, .. } => format!("end ({status})"),
        Change::Requeue { .. } => "requeue".into(),
    }
}

/// What a transition for a run that has no row any more comes to: skipped, with the reason.
/// The row was deleted by another program while the claim's shim ran (the daemon never
/// deletes an active run); an error here would stop every EVAL after it, for every project.
pub(crate) fn skip_for_a_missing_row(t: &Transition) -> Applied {
    Applied::Skipped(format!(
        "run {} has no row any more (deleted by another program?): its claim {}'s {} is not \
         written",
        t.run_id,
        t.token,
        reported(&t.change)
    ))
}

/// Decides what transition `t` writes on `run` (as read in the writing transaction).
///
/// `cancel`: the run's cancel request; the backend passes it whenever `run.cancel_requested`.
/// `hooks`: the failure hooks in force, by project. `now`: the instant of the write (ms UTC).
///
/// Skipped (not an error): a transition for another claim token than the run's, one the run
/// is already past (already that status, or already ended), and a start or an end of a run
/// that is `queued` again (moved back under its running claim by another writer). Errors:
/// [`StoreError::IllegalTransition`] when the state machine forbids the move otherwise, or when
/// a `Finish` names a status that is not terminal — a run is never moved where the one state
/// machine does not allow.
///
/// A `Requeue` of a run recorded `running` ends it `lost` (see [`Change::Requeue`]).
///
/// A cancel, once accepted, is final: a `Requeue` of a run with a cancel request ends it
/// `cancelled` instead (requeueing would only have it claimed, signalled and requeued again),
/// and a `Finish` queues no retry whatever the retry policy asked. A failed end with no retry
/// queues the project's failure hook ([`hook_run`]).
pub(crate) fn plan_transition(
    run: &Run,
    t: &Transition,
    cancel: Option<CancelRequest<'_>>,
    hooks: &FailureHooks,
    now: Millis,
) -> Result<Decision> {
    if run.claim_token != t.token {
        return Ok(Decision::Skip(format!(
            "run {} is at claim {}, the transition is for claim {}",
            run.id, run.claim_token, t.token
        )));
    }
    // The claim's shim reports a start or an end, but the run is `queued` again: something
    // other than this claim's daemon moved it back (a write by another program, a restored
    // copy of the database). Writing it is not allowed from `queued`, and an error would stop
    // every EVAL after it, for every project: the report is skipped, and said. The command did
    // start, and its claim's `started` record says so, so the run's next claim refuses to start
    // it again and ends it `lost`.
    if run.status == RunStatus::Queued && !matches!(t.change, Change::Requeue { .. }) {
        return Ok(Decision::Skip(format!(
            "run {} is queued again, moved back while its claim {} ran (by another program?): \
             the claim's {} is not written; its next claim will find the command started \
             already and end it lost",
            run.id,
            t.token,
            reported(&t.change)
        )));
    }
    // A run recorded `running` started: a requeue ("it never started") cannot be right for it.
    if let Change::Requeue { .. } = &t.change {
        if run.status == RunStatus::Running {
            let lost = Transition {
                run_id: t.run_id,
                token: t.token,
                change: Change::Finish {
                    status: RunStatus::Lost,
                    exit_code: None,
                    signal: None,
                    reason: Some(
                        "recorded running, but its run files hold no start of this claim \
                         (removed or replaced?): its end is unknown, and its command may \
                         still be running; not retried"
                            .into(),
                    ),
                    retry: None,
                    finished_at: None,
                },
            };
            return plan_transition(run, &lost, cancel, hooks, now);
        }
    }
    let cancelled_before_start = matches!(t.change, Change::Requeue { .. }) && run.cancel_requested;
    let to = match &t.change {
        Change::Running { .. } => RunStatus::Running,
        Change::Finish { status, .. } => *status,
        Change::Requeue { .. } if cancelled_before_start => RunStatus::Cancelled,
        Change::Requeue { .. } => RunStatus::Queued,
    };
    let illegal = || StoreError::IllegalTransition {
        run: run.id,
        from: run.status,
        to,
    };
    if !run.status.can_become(to) {
        if run.status == to || run.status.is_terminal() {
            return Ok(Decision::Skip(format!(
                "run {} is already {}",
                run.id, run.status
            )));
        }
        return Err(illegal());
    }
    if matches!(t.change, Change::Finish { .. }) && !to.is_terminal() {
        return Err(illegal());
    }
    let cancel = cancel.filter(|_| run.cancel_requested);
    let mut retry = None;
    let mut hook = None;
    let (write, detail) = match &t.change {
        Change::Running { pid } => (
            RunWrite::Running { pid: *pid },
            pid.map(|p| format!("pid {p}")),
        ),
        Change::Finish {
            status,
            exit_code,
            signal,
            reason,
            retry: retry_due,
            finished_at,
        } => {
            // The failure hook a failed end with no retry would queue.
            let hook_due = retry_due.is_none() && hook_run(run, *status, hooks).is_some();
            let note = end_note(
                &Ending {
                    status: *status,
                    reason: reason.as_deref(),
                    finished_at: *finished_at,
                    retry_due: retry_due.is_some(),
                    hook_due,
                },
                run.cancel_requested.then(|| {
                    cancel.unwrap_or(CancelRequest {
                        at: None,
                        reason: None,
                    })
                }),
            );
            // A cancel, once accepted, is final: no further attempt, whatever the retry policy,
            // and no failure hook either — the operator already acted on this run, and a run
            // stopped on request ends as lost or failed often enough (its end unknown, or it
            // failed before the signal reached it) that a hook would page for their own cancel.
            retry = retry_due
                .filter(|_| !run.cancel_requested)
                .map(|not_before| retry_run(run, not_before));
            if retry.is_none() && !run.cancel_requested {
                hook = hook_run(run, *status, hooks);
            }
            let write = RunWrite::End {
                status: *status,
                exit_code: *exit_code,
                signal: *signal,
                note: note.clone(),
                at: finished_at.unwrap_or(now),
                clear_pid: false,
            };
            (write, note)
        }
        Change::Requeue { .. } if cancelled_before_start => {
            let note = match cancel.and_then(|c| c.reason) {
                Some(words) => format!("{words}, before it started"),
                None => "cancelled before it started".to_string(),
            };
            let write = RunWrite::End {
                status: RunStatus::Cancelled,
                exit_code: None,
                signal: None,
                note: Some(note.clone()),
                at: now,
                clear_pid: true,
            };
            (write, Some(note))
        }
        Change::Requeue { reason } => (RunWrite::Requeue, Some(reason.clone())),
    };
    Ok(Decision::Apply(Box::new(TransitionPlan {
        from: run.status,
        to,
        write,
        detail,
        retry,
        hook,
        frees_seats: run.status.is_active() && !to.is_active(),
    })))
}

/// After a write of run `run`'s row for status `to` that changed `changed` rows: `Ok` for one,
/// else [`StoreError::RowIgnored`] (a trigger dropped the write without an error), which
/// rolls the whole transition back, its event included.
pub(crate) fn written(changed: u64, run: RunId, to: RunStatus) -> Result<()> {
    if changed == 0 {
        return Err(StoreError::RowIgnored { run, to });
    }
    Ok(())
}

/// The writes a backend supplies to carry out a [`TransitionPlan`] ([`execute`]), each on the
/// transaction that read the run for the decision.
pub(crate) trait TransitionWrites {
    /// Run `id`'s cancel request: when it was made and its words (either `None` if recorded
    /// before the database kept them).
    fn cancel_request(&mut self, id: RunId) -> Result<(Option<Millis>, Option<String>)>;
    /// Writes `w` on run `id`'s row. Errors: [`StoreError::RowIgnored`] when the write
    /// changed no row (see [`written`]).
    fn write_run(&mut self, id: RunId, w: &RunWrite) -> Result<()>;
    /// Inserts `new` as attempt `attempt` (retrying `retry_of`, if set); its id.
    fn insert_run(&mut self, new: &NewRun, attempt: u32, retry_of: Option<RunId>) -> Result<RunId>;
    /// Frees the seats run `id` held, where the backend keeps them in rows of their own (a
    /// backend whose seats live on the run row has nothing to do).
    fn free_seats(&mut self, id: RunId) -> Result<()>;
    /// Run `id` as it is now written. Errors: [`StoreError::UnknownRun`] if it is gone.
    fn reread(&mut self, id: RunId) -> Result<Run>;
    /// Appends the event of `after` moving from `from`, with `detail`.
    fn insert_event(&mut self, after: &Run, from: RunStatus, detail: Option<&str>) -> Result<()>;
}

/// Applies transition `t` to `run` (as read, locked where the backend needs it, in the
/// transaction `w` writes in): reads its cancel request if it has one and the transition is for
/// its claim, decides ([`plan_transition`]) and carries the plan out ([`execute`]). Errors:
/// [`plan_transition`]'s and the writes'.
pub(crate) fn apply(
    w: &mut impl TransitionWrites,
    run: &Run,
    t: &Transition,
    hooks: &FailureHooks,
    now: Millis,
) -> Result<Applied> {
    let (at, reason) = if run.cancel_requested && run.claim_token == t.token {
        w.cancel_request(run.id)?
    } else {
        (None, None)
    };
    let cancel = CancelRequest {
        at,
        reason: reason.as_deref(),
    };
    match plan_transition(run, t, Some(cancel), hooks, now)? {
        Decision::Skip(why) => Ok(Applied::Skipped(why)),
        Decision::Apply(plan) => execute(w, run.id, &plan),
    }
}

/// Carries out `plan` for run `id` through `w`, in the order [`TransitionPlan`] documents, and
/// says what was done. Errors: any of the writes'; the caller's transaction then rolls back.
pub(crate) fn execute(
    w: &mut impl TransitionWrites,
    id: RunId,
    plan: &TransitionPlan,
) -> Result<Applied> {
    w.write_run(id, &plan.write)?;
    let retry = match &plan.retry {
        Some(r) => Some(w.insert_run(&r.run, r.attempt, Some(r.retry_of))?),
        None => None,
    };
    if plan.frees_seats {
        w.free_seats(id)?;
    }
    let after = w.reread(id)?;
    w.insert_event(&after, plan.from, plan.detail.as_deref())?;
    // After the end's own event, so that the history reads in order: the end, then its hook.
    let hook = match &plan.hook {
        Some(new) => Some(w.insert_run(new, 1, None)?),
        None => None,
    };
    Ok(Applied::Done {
        status: plan.to,
        retry,
        hook,
        run: Box::new(after),
    })
}

/// The next attempt of `run`, not before `not_before` (ms UTC).
fn retry_run(run: &Run, not_before: Millis) -> RetryRun {
    RetryRun {
        run: NewRun {
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
        },
        attempt: run.attempt + 1,
        retry_of: run.id,
    }
}

/// Whether an end of `status` reports to a failure hook: a failure, never a success nor a
/// cancel (an operator's decision is not a failure).
fn is_failure(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Lost
    )
}

/// The failure hook's run that `run` ending `status` calls for, if any: it ended in a failure,
/// is not itself a hook's run (a hook's failure would otherwise report to a hook in a chain
/// with no end) and its project has a hook in `hooks`. The caller has already decided that no
/// retry follows.
///
/// Being written by the transaction that writes the end is the whole design: an end is written
/// exactly once (a transition for a run already ended is skipped), so its hook is queued exactly
/// once, whether the end was found by a reap, by recovery after a crash, or at spawn.
pub(crate) fn hook_run(run: &Run, status: RunStatus, hooks: &FailureHooks) -> Option<NewRun> {
    if !is_failure(status) || run.hook_of.is_some() {
        return None;
    }
    let hook = hooks.get(&run.project)?;
    Some(NewRun {
        project: hook.project.clone(),
        namespace: hook.namespace.clone(),
        trigger: Trigger::OnFailure,
        hook_of: Some(run.id),
        ..Default::default()
    })
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
    /// With no retry, the end would queue the project's failure hook.
    pub(crate) hook_due: bool,
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
            } else if end.hook_due {
                part += "; no failure hook after a cancel";
            }
            Some(part)
        }
    };
    match (end.reason, cancel_part) {
        (Some(r), Some(c)) => Some(format!("{r}; {c}")),
        (r, c) => c.or(r.map(str::to_string)),
    }
}

#[cfg(test)]
mod tests;
