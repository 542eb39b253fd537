//! The reap, the EVAL's first step: settling the shims that exited since the last EVAL from
//! their run files ([`reap`], on the EVAL's blocking thread). What becomes of the runs that
//! could not be settled yet is the caller's: the daemon logs those whose files stay unreadable
//! at doubling intervals, follows those whose lock is still held, and kills what is left of an
//! orphaned command's process group first (`daemon/reap.rs`).
//!
//! It decides only through [`settle::settle`] and [`settle::transition`]; writing the
//! transitions is the EVAL's ([`crate::daemon::eval_blocking`]), in the same transaction as
//! the others.

use std::collections::BTreeMap;
use std::path::Path;

use runrecord::RunFiles;
use store::{Millis, RunId, Transition};

use crate::retry::RetryPolicy;
use crate::settle::{self, Fate};

/// What the reap decided about the shims that exited.
pub struct Reaped {
    /// The transitions their run files call for.
    pub transitions: Vec<Transition>,
    /// Shims whose run files could not be read: looked at again at the next EVAL. With what
    /// went wrong, for the log.
    pub unreadable: Vec<(RunId, u64, String)>,
    /// Shims whose report pipe ended while their lock is still held: waited for.
    pub still_locked: Vec<(RunId, u64)>,
    /// Shims that died while their command's process group lives on (`Fate::Orphaned`): run,
    /// token, process group, session (the shim's pid and start time; `None` when the group is
    /// known by its number alone). Their runs stay active; the caller kills a group identified
    /// by its session, and waits for each.
    pub orphaned: Vec<(RunId, u64, i32, Option<crate::sys::process::Session>)>,
}

/// What the reap needs to know about a slot: its claim's token, its attempt, its retry policy,
/// and its command's pid once reported ([`crate::slots::Slot::command_pid`]).
pub type SlotView = (u64, u32, RetryPolicy, Option<i32>);

/// The reap (blocking: reads run files under `state_dir`, may write a tombstone): settles each
/// shim in `exited` whose claim is still the one in `slots`, and decides its transition (retry
/// instants from `now`, milliseconds since the epoch, UTC). Exits of an older claim, or of a run
/// no longer supervised, are ignored.
pub fn reap(
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
