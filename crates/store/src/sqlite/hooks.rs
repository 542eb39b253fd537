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

/// Queues the failure hook's run for `ended` (the run as its end was just written), if it
/// ended in a failure, is not itself a hook's run (a hook's failure would otherwise report to
/// a hook in a chain with no end) and its project has a hook in `hooks`. The caller has already
/// decided that no retry follows. Returns the hook run's id.
pub(super) fn queue_hook(
    conn: &Connection,
    ended: &Run,
    hooks: &FailureHooks,
    now: Millis,
) -> Result<Option<RunId>> {
    if !is_failure(ended.status) || ended.hook_of.is_some() {
        return Ok(None);
    }
    let Some(hook) = hooks.get(&ended.project) else {
        return Ok(None);
    };
    let new = NewRun {
        project: hook.project.clone(),
        namespace: hook.namespace.clone(),
        trigger: Trigger::OnFailure,
        hook_of: Some(ended.id),
        ..Default::default()
    };
    insert_run(conn, &new, 1, None, now).map(Some)
}
