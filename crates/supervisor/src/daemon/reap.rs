//! What the daemon does with what the reap ([`crate::core::reap`]) could not settle: it
//! kills what is left of an orphaned command's process group ([`end_orphaned`]); following a
//! lock still held, or a group until it is empty, is `follow`'s.

use store::RunId;

/// Ends what is left of a run whose shim died while processes of its command's process group
/// `pgid` still run ([`Fate::Orphaned`]), when `session` identifies the group: SIGKILL to the
/// group, as the shim would have sent on its way out, so that the run's retry never runs
/// beside it. A group known by its number alone (no `session`: the run's files no longer name
/// it) is not signalled, since the number may belong to another program by now; the log says
/// why the run stays active and how to end the group. Logged; a group that cannot be signalled
/// (its processes changed user, say) is left to end by itself, and the log says how to end it.
/// The run is settled once the group is empty ([`super::follow::watch_group`]).
pub(super) fn end_orphaned(
    run_id: RunId,
    pgid: i32,
    session: Option<crate::sys::process::Session>,
) {
    if session.is_none() {
        tracing::warn!(run = run_id, pgid, "the run's files do not name its command's process group (removed or overwritten?), but a process group with the number recorded for it is still there: the run stays active, holding its seats, until that group is empty; fleet does not signal it, since the number alone may belong to another program (`kill -KILL -- -{pgid}` ends it once you have checked)");
        return;
    }
    match crate::sys::process::signal_group(pgid, crate::sys::signals::Signal::SIGKILL) {
        Ok(_) => {
            tracing::warn!(run = run_id, pgid, "the run's shim is gone but its command, or processes it started in its group, were still running: killed them (SIGKILL); the run ends lost once they are gone");
        }
        Err(e) => {
            tracing::warn!(
                run = run_id,
                pgid,
                error = %e,
                "the run's shim is gone but processes of its command's group are still running, and they could not be killed; the run stays active (holding its seats, not retried) until they are gone (`kill -KILL -- -{pgid}` as their user ends them)"
            );
        }
    }
}
