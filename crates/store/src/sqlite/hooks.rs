//! Failure hooks: the run a failed end queues, written by the transaction that writes the end.
//!
//! Being part of that transaction is the whole design: an end is written exactly once (a
//! transition for a run already ended is skipped), so its hook is queued exactly once, whether
//! the end was found by a reap, by recovery after a crash, or at spawn. A crash before the
//! commit loses both, and the next recovery writes both.

use rusqlite::Connection;

use super::runs::insert_run;
use crate::error::Result;
use crate::{FailureHooks, Millis, NewRun, Run, RunId, RunStatus, Trigger};

/// Whether an end of `status` reports to a failure hook: a failure, never a success nor a
/// cancel (an operator's decision is not a failure).
fn is_failure(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Lost
    )
}

/// The failure hook's run `ended` (the run as its end was just written) calls for, if any: it
/// ended in a failure, is not itself a hook's run (a hook's failure would otherwise report to a
/// hook in a chain with no end) and its project has a hook in `hooks`. The caller has already
/// decided that no retry follows. Shared by both backends: what to queue is decided once.
pub(crate) fn hook_run(ended: &Run, hooks: &FailureHooks) -> Option<NewRun> {
    if !is_failure(ended.status) || ended.hook_of.is_some() {
        return None;
    }
    let hook = hooks.get(&ended.project)?;
    Some(NewRun {
        project: hook.project.clone(),
        namespace: hook.namespace.clone(),
        trigger: Trigger::OnFailure,
        hook_of: Some(ended.id),
        ..Default::default()
    })
}

/// Queues [`hook_run`]'s run, if any, on the caller's transaction; returns its id.
pub(super) fn queue_hook(
    conn: &Connection,
    ended: &Run,
    hooks: &FailureHooks,
    now: Millis,
) -> Result<Option<RunId>> {
    hook_run(ended, hooks)
        .map(|new| insert_run(conn, &new, 1, None, now))
        .transpose()
}
