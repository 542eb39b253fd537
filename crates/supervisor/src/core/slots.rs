//! When a slot of the pool may go, once an EVAL wrote (or was refused) its run's transition.
//!
//! A slot holds its run's seats in the running set the packers see, beside the database's. It
//! goes when this daemon's end (or requeue) of the run is written; when the database skipped
//! the transition (another writer ended the run, queued it again or removed it), only once
//! the shim no longer holds the run ([`shim_done_with`]): while it does, its command runs and
//! takes its seat under every cap, whatever the row says.

use std::path::Path;

use runrecord::RunFiles;
use store::{Applied, RunId, RunStatus};

use crate::slots::{ShimIdentity, SlotPool};

/// Removes from `slots` the runs whose written transition left them past active (ended, or
/// queued again). Returns the runs whose transition the database skipped, with why: the caller
/// reads their rows and asks [`shim_done_with`] whether their slots may go.
pub fn release_ended(slots: &mut SlotPool, applied: &[(RunId, Applied)]) -> Vec<(RunId, String)> {
    let mut skipped = Vec::new();
    for (run_id, applied) in applied {
        match applied {
            Applied::Done { status, .. } => {
                if status.is_terminal() || *status == RunStatus::Queued {
                    slots.remove(*run_id);
                }
            }
            Applied::Skipped(why) => skipped.push((*run_id, why.to_string())),
        }
    }
    skipped
}

/// Whether the shim of `run_id`'s slot is done with the run, so that the slot may go although
/// no end of this daemon's was written: its row was ended, queued again or removed by someone
/// else (`status`: the row's status, `Some(None)` when it is gone, `None` when it could not be
/// read). While the shim holds the run's lock (under `state_dir`) its command runs, and takes
/// its seat under every cap. (A slot of a newer claim of this host has that claim's shim.) A
/// shim alive without the lock has ended the run and may be on another by now (the fork server
/// reuses shims); one that moved on is known to have. A slot whose shim cannot be told goes
/// when the row says the run is no longer active. `alive` says whether a shim is still that
/// process.
pub fn shim_done_with(
    slots: &SlotPool,
    run_id: RunId,
    status: Option<Option<RunStatus>>,
    state_dir: &Path,
    alive: &dyn Fn(ShimIdentity) -> bool,
) -> bool {
    match slots.get(run_id).map(|s| (s.shim, s.shim_moved_on)) {
        Some((Some(shim), _)) => {
            !alive(shim) || matches!(RunFiles::new(state_dir, run_id).is_locked(), Ok(false))
        }
        Some((None, true)) => true,
        Some((None, false)) => matches!(status, Some(Some(s)) if !s.is_active()),
        None => false,
    }
}

#[cfg(test)]
mod tests;
