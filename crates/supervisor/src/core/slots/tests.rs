//! When a slot may go: after this daemon's own transitions, and after another writer's.

use runrecord::RunFiles;
use store::{Applied, RunStatus};

use super::*;

fn done(id: RunId, status: RunStatus) -> (RunId, Applied) {
    (
        id,
        Applied::Done {
            status,
            retry: None,
            hook: None,
            run: Box::new(crate::core::test_run(id, status)),
        },
    )
}

const SHIM: ShimIdentity = ShimIdentity {
    pid: 5_000_001,
    start_time: 1,
};

/// An end or a requeue frees the slot; a start keeps it; a skipped transition is handed back
/// with its reason, its slot kept for the caller to judge.
#[test]
fn written_ends_free_their_slots_and_skips_are_handed_back() {
    let mut slots = SlotPool::new();
    for id in 1..=4 {
        slots.insert(crate::slots::test_slot(id, None));
    }
    let skipped = release_ended(
        &mut slots,
        &[
            done(1, RunStatus::Succeeded),
            done(2, RunStatus::Queued),
            done(3, RunStatus::Running),
            (4, Applied::Skipped("ended by another writer".into())),
        ],
    );
    let left: Vec<RunId> = slots.iter().map(|s| s.run_id).collect();
    assert_eq!(left, vec![3, 4]);
    assert_eq!(skipped, vec![(4, "ended by another writer".to_string())]);
}

/// A live shim that holds its run's lock keeps the slot whatever the row says; once it lets
/// the lock go, or dies, the slot may go.
#[test]
fn a_shim_holding_the_lock_keeps_its_seat_whatever_the_row_says() {
    let dir = tempfile::tempdir().unwrap();
    let files = RunFiles::new(dir.path(), 1);
    files.create_runs_dir().unwrap();
    let mut slots = SlotPool::new();
    slots.insert(crate::slots::test_slot(1, Some(SHIM)));
    let ended = Some(Some(RunStatus::Lost));
    let lock = files.try_lock().unwrap().expect("the lock is free");
    assert!(!shim_done_with(&slots, 1, ended, dir.path(), &|_| true));
    // Dead: done, held lock or not (a dead process holds no lock for long).
    assert!(shim_done_with(&slots, 1, ended, dir.path(), &|_| false));
    drop(lock);
    assert!(shim_done_with(&slots, 1, ended, dir.path(), &|_| true));
}

/// With no shim to ask, the row decides: the slot goes once the run is no longer active, or
/// at once when the shim is known to have moved on to another run.
#[test]
fn without_a_shim_the_row_or_a_move_on_decides() {
    let dir = tempfile::tempdir().unwrap();
    let mut slots = SlotPool::new();
    slots.insert(crate::slots::test_slot(1, None));
    let alive = |_| panic!("no shim to ask");
    assert!(!shim_done_with(
        &slots,
        1,
        Some(Some(RunStatus::Running)),
        dir.path(),
        &alive
    ));
    assert!(!shim_done_with(&slots, 1, None, dir.path(), &alive));
    assert!(shim_done_with(
        &slots,
        1,
        Some(Some(RunStatus::Cancelled)),
        dir.path(),
        &alive
    ));
    if let Some(s) = slots.get_mut(1) {
        s.shim_moved_on = true;
    }
    assert!(shim_done_with(&slots, 1, None, dir.path(), &alive));
    // No slot at all: nothing to free.
    assert!(!shim_done_with(&slots, 9, Some(None), dir.path(), &alive));
}
