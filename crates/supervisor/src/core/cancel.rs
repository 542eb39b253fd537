//! The daemon's half of `fleet cancel`: the command records the request in the database; after
//! each EVAL the daemon sends SIGTERM to the shim of every run of its slot pool whose cancel was
//! requested, once. The shim then ends the command and records it as cancelled. The signal is
//! sent through the caller's `send` (a real one checks the pid is still that shim first; the
//! simulator's reaches its simulated shim).
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
/// and whose slot is in `slots`, once each (a slot remembers it was signalled), through `send`
/// (true when it was sent: the shim was still that process). A shim not yet
/// identified is looked up in its run's files (`state_dir`); one still unknown is tried again
/// after the next EVAL.
pub fn signal_cancelled(
    slots: &mut SlotPool,
    state_dir: &Path,
    db_active: &[Run],
    send: &mut dyn FnMut(ShimIdentity, Signal) -> bool,
) {
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
            Some(shim) if send(shim, Signal::SIGTERM) => {
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
pub fn identify_shim(slots: &mut SlotPool, run_id: store::RunId, state_dir: &Path) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use runrecord::StartedRecord;

    fn run(id: store::RunId, cancel_requested: bool) -> Run {
        let mut r = crate::core::test_run(id, store::RunStatus::Running);
        r.cancel_requested = cancel_requested;
        r
    }

    /// Only the shims of runs whose cancel was requested are signalled, once each; one that
    /// could not be reached is tried again at the next call.
    #[test]
    fn each_cancelled_run_is_signalled_once() {
        let dir = tempfile::tempdir().unwrap();
        let shim = |pid| ShimIdentity { pid, start_time: 1 };
        let mut slots = SlotPool::new();
        slots.insert(crate::slots::test_slot(1, Some(shim(11))));
        slots.insert(crate::slots::test_slot(2, Some(shim(12))));
        slots.insert(crate::slots::test_slot(3, Some(shim(13))));
        let active = [run(1, true), run(2, false), run(3, true)];
        let mut sent = Vec::new();
        let mut reachable = vec![11];
        signal_cancelled(&mut slots, dir.path(), &active, &mut |s, sig| {
            assert_eq!(sig, Signal::SIGTERM);
            sent.push(s.pid);
            reachable.contains(&s.pid)
        });
        assert_eq!(sent, vec![11, 13]);
        // Run 1 was signalled: never again. Run 3 could not be: tried again.
        sent.clear();
        reachable.push(13);
        signal_cancelled(&mut slots, dir.path(), &active, &mut |s, _| {
            sent.push(s.pid);
            reachable.contains(&s.pid)
        });
        assert_eq!(sent, vec![13]);
    }

    /// A slot with no shim yet finds it in its run's `started` record, for its own claim only.
    #[test]
    fn a_shim_not_yet_known_is_found_in_the_started_record_of_its_claim() {
        let dir = tempfile::tempdir().unwrap();
        let files = RunFiles::new(dir.path(), 1);
        files.create_runs_dir().unwrap();
        let lock = files.try_lock().unwrap().expect("free");
        let started = |token| StartedRecord {
            token,
            shim_pid: 21,
            shim_start_time: 5,
            at: "2026-01-01T00:00:00.000Z".into(),
            history: Vec::new(),
        };
        // The slot is of claim 1 (`test_slot`); claim 8's shim is not its own.
        files.write_started(&lock, &started(8)).unwrap();
        let mut slots = SlotPool::new();
        slots.insert(crate::slots::test_slot(1, None));
        identify_shim(&mut slots, 1, dir.path());
        assert_eq!(slots.get(1).unwrap().shim, None, "another claim's shim");
        files.write_started(&lock, &started(1)).unwrap();
        identify_shim(&mut slots, 1, dir.path());
        assert_eq!(
            slots.get(1).unwrap().shim,
            Some(ShimIdentity {
                pid: 21,
                start_time: 5
            })
        );
    }
}
