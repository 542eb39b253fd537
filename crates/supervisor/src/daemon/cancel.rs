//! The daemon's half of `fleet cancel`: the command records the request in the database; after
//! each EVAL the daemon sends SIGTERM to the shim of every run of its slot pool whose cancel was
//! requested, once. The shim then ends the command and records it as cancelled.
//!
//! This step must never change a run's status (that happens when the shim reports the process
//! gone, so the record always says how the command really ended), and never signals a pid it
//! cannot identify as that run's shim (pids are recycled).

use std::path::Path;

use store::Run;

use crate::shim::runfiles::RunFiles;
use crate::slots::{ShimIdentity, SlotPool};
use crate::sys::signals::Signal;

/// Signals the shims of the runs in `db_active` (the DB running set) whose cancel was requested
/// and whose slot is in `slots`, once each (a slot remembers it was signalled). A shim not yet
/// identified is looked up in its run's files (`state_dir`); one still unknown is tried again
/// after the next EVAL.
pub(super) fn signal_cancelled(slots: &mut SlotPool, state_dir: &Path, db_active: &[Run]) {
    for run in db_active.iter().filter(|r| r.cancel_requested) {
        let Some(slot) = slots.get_mut(run.id) else {
            continue;
        };
        if slot.cancel_sent {
            continue;
        }
        identify_shim(slot, state_dir);
        match slot.shim {
            Some(shim) if shim.signal(Signal::SIGTERM) => {
                tracing::info!(
                    run = run.id,
                    project = %run.project,
                    "cancel: sent SIGTERM to the run's shim"
                );
                slot.cancel_sent = true;
            }
            // Not spawned yet, or not ours to identify: try again next EVAL.
            _ => {}
        }
    }
}

/// Looks the shim of `slot` up in its run's files (under `state_dir`) when it is not yet known:
/// adopted before its shim had written `started`, or forked without an answer from the fork
/// server. Only a shim that wrote this claim's token counts (pids are recycled).
pub(super) fn identify_shim(slot: &mut crate::slots::Slot, state_dir: &Path) {
    if slot.shim.is_none() {
        slot.shim = RunFiles::new(state_dir, slot.run_id)
            .read_started()
            .ok()
            .flatten()
            .filter(|s| s.token == slot.token)
            .map(|s| ShimIdentity {
                pid: s.shim_pid,
                start_time: s.shim_start_time,
            });
    }
}
