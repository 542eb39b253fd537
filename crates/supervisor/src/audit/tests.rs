//! Unit tests of `fleet check` on a state directory made by hand: held locks, start histories,
//! claims and their ages.

use super::*;
use runrecord::StartedRecord;

fn started(token: u64, history: Vec<u64>) -> StartedRecord {
    StartedRecord {
        token,
        shim_pid: 1,
        shim_start_time: 0,
        at: "2026-01-01T00:00:00Z".into(),
        history,
    }
}

fn setup() -> (tempfile::TempDir, StateDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::new(dir.path());
    let store = state.open_store().unwrap();
    (dir, state, store)
}

/// Claims run `id` of namespace `default` at `at` (UTC ms), under a global cap of 4.
fn claim_one(store: &Store, epoch: i64, id: RunId, at: Millis) {
    let request = store::ClaimRequest {
        run_id: id,
        namespace: "default".into(),
        global_cap: 4,
        namespace_cap: None,
        max_parallel: 1,
        host_cap: None,
        config_version: None,
    };
    store.claim(epoch, &[request], at).unwrap();
}

/// [`setup`] with run 1 queued, and its files.
fn setup_with_a_run() -> (tempfile::TempDir, StateDir, Store, RunFiles) {
    let (dir, state, store) = setup();
    let new = store::NewRun {
        project: "p".into(),
        namespace: "default".into(),
        ..Default::default()
    };
    assert_eq!(store.enqueue(&new, 0).unwrap(), 1);
    let run = RunFiles::new(state.root(), 1);
    (dir, state, store, run)
}

/// A lock held on a run the database does not hold as active is reported only when it
/// lasts: held for an instant (prune removing an ended run's files, a claim made after the
/// rows were read), it is not a violation.
#[test]
fn a_lock_held_for_an_instant_is_no_shim_without_a_run() {
    let (_d, state, store, run) = setup_with_a_run();
    let lock = run.try_lock().unwrap().unwrap();
    run.write_started(&lock, &started(5, vec![5])).unwrap();
    // Held a while, well within what check waits for: as prune holds an ended run's.
    const HOLD: Duration = Duration::from_millis(300);
    let release = std::thread::spawn(move || {
        std::thread::sleep(HOLD);
        drop(lock);
    });
    let report = audit(&state, &store, 0, None).unwrap();
    release.join().unwrap();
    assert!(report.ok(), "{:?}", report.violations);

    let lock = run.try_lock().unwrap().unwrap();
    let report = audit(&state, &store, 0, None).unwrap();
    let kinds: Vec<_> = report.violations.iter().map(|v| v.kind).collect();
    assert_eq!(kinds, vec![ViolationKind::ShimWithoutActiveRun]);
    assert!(
        report.violations[0]
            .message
            .contains("but the run is queued"),
        "{:?}",
        report.violations
    );
    drop(lock);
}

/// The shims' start history is the ground truth: a command started by two claims of one
/// run, or by a claim recovery had given up, is a double start even if the database never
/// heard of the second start.
#[test]
fn start_history_reveals_double_starts_the_database_missed() {
    // Run 1's row: a folder without one would be a violation of its own.
    let (_d, state, store, run) = setup_with_a_run();
    let lock = run.try_lock().unwrap().unwrap();
    run.write_started(&lock, &started(2, vec![2])).unwrap();
    drop(lock);
    let ok = audit(&state, &store, 0, None).unwrap();
    assert!(ok.ok(), "{:?}", ok.violations);

    let lock = run.try_lock().unwrap().unwrap();
    run.write_started(&lock, &started(1, vec![2, 1])).unwrap();
    run.write_tombstone(&lock, 1).unwrap();
    drop(lock);
    let bad = audit(&state, &store, 0, None).unwrap();
    let kinds: Vec<_> = bad.violations.iter().map(|v| v.kind).collect();
    assert_eq!(
        kinds,
        vec![ViolationKind::DoubleStart, ViolationKind::DoubleStart]
    );
    assert!(
        bad.violations[1].message.contains("tombstoned"),
        "{:?}",
        bad.violations
    );
}

/// A run claimed twice with no requeue between (another program queued it again while it
/// ran): its files clear the finding only when the one claim they name as the starter is
/// the first of the two; named the second, the first may have started too.
#[test]
fn a_second_claim_is_cleared_only_by_a_start_of_the_first() {
    let (_d, state, store, run) = setup_with_a_run();
    let epoch = store.take_over("local", 1, "fleet.toml", "{}", 0).unwrap();
    let claim = |at: Millis| {
        claim_one(&store, epoch, 1, at);
        store.get_run(1).unwrap().claim_token
    };
    let first = claim(1_000);
    let db = rusqlite::Connection::open(state.root().join("fleet.db")).unwrap();
    db.execute("UPDATE runs SET status = 'queued' WHERE id = 1", [])
        .unwrap();
    let second = claim(2_000);
    assert_ne!(first, second);
    let double_starts = |starter: u64| {
        let lock = run.try_lock().unwrap().unwrap();
        run.write_started(&lock, &started(starter, vec![starter]))
            .unwrap();
        drop(lock);
        audit(&state, &store, 3_000, None)
            .unwrap()
            .violations
            .iter()
            .filter(|v| v.kind == ViolationKind::DoubleStart)
            .count()
    };
    assert_eq!(double_starts(first), 0);
    assert_eq!(double_starts(second), 1);
}

/// A `starting` row without a claim time (written by another program: every claim stamps
/// it) is not young whatever the clock says: no shim holds it, and check says so at once
/// rather than waiting for a grace that would never end.
#[test]
fn a_starting_row_without_a_claim_time_is_not_young() {
    let (_d, state, store, _run) = setup_with_a_run();
    let db = rusqlite::Connection::open(state.root().join("fleet.db")).unwrap();
    db.execute(
        "UPDATE runs SET status = 'starting', seat = 0, started_at = NULL WHERE id = 1",
        [],
    )
    .unwrap();
    let report = audit(&state, &store, 1_000, None).unwrap();
    let kinds: Vec<_> = report.violations.iter().map(|v| v.kind).collect();
    assert_eq!(kinds, vec![ViolationKind::ActiveWithoutShim], "{report:?}");
}

/// A `starting` run without a shim is given a grace period after its claim; a claim whose
/// time is far after `now` (written by a clock that has since stepped back) is no young
/// claim, and is reported like an old one.
#[test]
fn a_claim_from_a_clock_ahead_is_not_young() {
    let (_d, state, store) = setup();
    let epoch = store.take_over("local", 1, "fleet.toml", "{}", 0).unwrap();
    let id = store
        .enqueue(
            &store::NewRun {
                project: "p".into(),
                namespace: "default".into(),
                priority: 0,
                trigger: store::Trigger::Manual,
                occurrence: None,
                not_before: 0,
                ..Default::default()
            },
            0,
        )
        .unwrap();
    let claimed_at = 400 * 86_400_000;
    claim_one(&store, epoch, id, claimed_at);
    let shimless = |now: Millis| {
        audit(&state, &store, now, None)
            .unwrap()
            .violations
            .iter()
            .any(|v| v.kind == ViolationKind::ActiveWithoutShim)
    };
    assert!(
        !shimless(claimed_at + 1_000),
        "young: its shim may still be locking"
    );
    assert!(shimless(claimed_at + STARTING_GRACE_MS + 1));
    assert!(
        shimless(claimed_at - 365 * 86_400_000),
        "a claim a year ahead of the clock passed for young"
    );
}
