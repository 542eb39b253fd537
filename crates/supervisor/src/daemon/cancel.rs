//! The daemon's half of `fleet cancel`: the command records the request in the database; after
//! each EVAL the daemon sends SIGTERM to the shim of every run of its slot pool whose cancel was
//! requested, once. The shim then ends the command and records it as cancelled.
//!
//! This step must never change a run's status (that happens when the shim reports the process
//! gone, so the record always says how the command really ended), and never signals a pid it
//! cannot identify as that run's shim (pids are recycled).

use std::path::Path;

use runrecord::RunFiles;
use store::Run;

use crate::slots::{ShimIdentity, SlotPool};
use crate::sys::signals::Signal;

/// Signals the shims of the runs in `db_active` (the DB running set) whose cancel was requested
/// and whose slot is in `slots`, once each (a slot remembers it was signalled). A shim not yet
/// identified is looked up in its run's files (`state_dir`); one still unknown is tried again
/// after the next EVAL.
pub(super) fn signal_cancelled(slots: &mut SlotPool, state_dir: &Path, db_active: &[Run]) {
    for run in db_active.iter().filter(|r| r.cancel_requested) {
        match slots.get_mut(run.id) {
            Some(slot) if !slot.cancel_sent => {}
            _ => continue,
        }
        identify_shim(slots, run.id, state_dir);
        let Some(slot) = slots.get_mut(run.id) else {
            continue;
        };
        match slot.shim {
            Some(shim) if shim.signal(Signal::SIGTERM) => {
                tracing::info!(
                    run = run.id,
                    project = %run.project,
                    "cancel: sent SIGTERM to the run's shim"
                );
                slot.cancel_sent = true;
            }
            // Not spawned yet, or not ours to identify: try again next EVAL. (A shim that
            // moved on to another run has ended this one: its end is on its way.)
            _ => {}
        }
    }
}

/// Looks the shim of `run_id`'s slot up in its run's files (under `state_dir`) when it is not
/// yet known: adopted before its shim had written `started`, or forked without an answer from
/// the fork server. Only a shim that wrote this claim's token counts (pids are recycled), and
/// never one that has moved on to another run since ([`crate::slots::Slot::shim_moved_on`]):
/// the files still name it, but it is another run's now.
pub(super) fn identify_shim(slots: &mut SlotPool, run_id: store::RunId, state_dir: &Path) {
    let Some(slot) = slots.get_mut(run_id) else {
        return;
    };
    if slot.shim.is_some() || slot.shim_moved_on {
        return;
    }
    let token = slot.token;
    let found = RunFiles::new(state_dir, run_id)
        .read_started()
        .ok()
        .flatten()
        .filter(|s| s.token == token)
        .map(|s| ShimIdentity {
            pid: s.shim_pid,
            start_time: s.shim_start_time,
        });
    if let Some(shim) = found {
        slots.set_shim(run_id, shim);
    }
}
