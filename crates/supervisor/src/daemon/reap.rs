//! The reap, the EVAL's first step: settling the shims that exited since the last EVAL from
//! their run files ([`reap`], on the EVAL's blocking thread), and what the loop does with the
//! runs that could not be settled yet — logged at doubling intervals while their files stay
//! unreadable (`note_unreadable`, in [`super::unreadable`]), followed while a lock is still held or an orphaned
//! command's process group lives on, which is killed first ([`end_orphaned`]).
//!
//! It decides only through [`settle::settle`] and [`settle::transition`]; writing the
//! transitions is the EVAL's ([`super::eval`]), in the same transaction as the others.

use std::collections::BTreeMap;
use std::path::Path;

use runrecord::RunFiles;
use store::{Millis, RunId, Transition};

use crate::retry::RetryPolicy;
use crate::settle::{self, Fate};

/// What the reap decided about the shims that exited.
pub(super) struct Reaped {
    /// The transitions their run files call for.
    pub(super) transitions: Vec<Transition>,
    /// Shims whose run files could not be read: looked at again at the next EVAL. With what
    /// went wrong, for the log.
    pub(super) unreadable: Vec<(RunId, u64, String)>,
    /// Shims whose report pipe ended while their lock is still held: waited for.
    pub(super) still_locked: Vec<(RunId, u64)>,
    /// Shims that died while their command's process group lives on (`Fate::Orphaned`): run,
    /// token, process group, session (the shim's pid and start time; `None` when the group is
    /// known by its number alone). Their runs stay active; a group identified by its session
    /// was sent SIGKILL; each is waited for.
    pub(super) orphaned: Vec<(RunId, u64, i32, Option<crate::sys::process::Session>)>,
}

/// What the reap needs to know about a slot: its claim's token, its attempt, its retry policy,
/// and its command's pid once reported ([`crate::slots::Slot::command_pid`]).
pub(super) type SlotView = (u64, u32, RetryPolicy, Option<i32>);

/// The reap (blocking: reads run files under `state_dir`, may write a tombstone): settles each
/// shim in `exited` whose claim is still the one in `slots`, and decides its transition (retry
/// instants from `now`, milliseconds since the epoch, UTC). Exits of an older claim, or of a run
/// no longer supervised, are ignored.
pub(super) fn reap(
    state_dir: &Path,
    exited: Vec<(RunId, u64)>,
    slots: &BTreeMap<RunId, SlotView>,
    now: Millis,
) -> Reaped {
    let mut out = Reaped {
        transitions: Vec::new(),
        unreadable: Vec::new(),
        still_locked: Vec::new(),
        orphaned: Vec::new(),
    };
    for (run_id, token) in exited {
        let Some(&(slot_token, attempt, policy, command_pid)) = slots.get(&run_id) else {
            continue;
        };
        if slot_token != token {
            continue;
        }
        let dir = RunFiles::new(state_dir, run_id);
        // A slot is this daemon's claim, or one it adopted alive: either way of this boot, so a
        // `started` record its shim wrote is still there to read.
        match settle::settle(&dir, token, command_pid, true) {
            // The shim's report pipe can reach end-of-file an instant before the kernel drops
            // its lock (a crashed shim's descriptors close in order): wait for the lock, as for
            // an adopted run.
            Ok(Fate::Alive) => out.still_locked.push((run_id, token)),
            // The shim died, and what its command started runs on: the run stays active (its
            // slot and seats held) until that is gone.
            Ok(Fate::Orphaned { pgid, session }) => {
                end_orphaned(run_id, pgid, session);
                out.orphaned.push((run_id, token, pgid, session));
            }
            Ok(f) => {
                out.transitions
                    .extend(settle::transition(run_id, token, attempt, &f, policy, now));
            }
            Err(e) => {
                let error = format!("{}: {e}", dir.lock_path().display());
                out.unreadable.push((run_id, token, error));
            }
        }
    }
    out
}

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
