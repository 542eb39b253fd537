//! Unit tests of settling: each fate from the run files that call for it, the tombstone written
//! only for a claim that provably never started, a record that cannot be read never taken for a
//! missing one, and the status each exit record stands for.

use std::fs;

use runrecord::{now_rfc3339, StartedRecord};
use store::{Change, RunStatus};

use super::*;

const TOKEN: u64 = 7;

fn run_dir() -> (tempfile::TempDir, RunFiles) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = RunFiles::new(tmp.path(), 1);
    dir.create_runs_dir().unwrap();
    (tmp, dir)
}

/// Makes the run's overflow file unreadable: a folder stands where it goes, so that reading
/// the run's records fails as an I/O error of any kind would.
fn unreadable_overflow(dir: &RunFiles) {
    fs::create_dir(dir.more_path()).unwrap();
}

/// A started record of claim `token` (also used by the run files' tests).
pub(crate) fn started(token: u64) -> StartedRecord {
    StartedRecord {
        token,
        shim_pid: 1,
        shim_start_time: 1,
        at: now_rfc3339(),
        history: vec![token],
    }
}

fn exit(token: u64, outcome: Outcome, code: Option<i32>, signal: Option<i32>) -> ExitRecord {
    ExitRecord {
        token,
        outcome,
        code,
        signal,
        timed_out: false,
        term_requested: false,
        error: None,
        started_at: Some(now_rfc3339()),
        finished_at: "2024-01-02T03:04:05.678Z".into(),
        repeats: None,
    }
}

/// Writes the records as a shim would, under the run's lock, and lets the lock go.
fn write(dir: &RunFiles, s: Option<StartedRecord>, e: Option<ExitRecord>) {
    let lock = dir.try_lock().unwrap().unwrap();
    if let Some(s) = s {
        dir.write_started(&lock, &s).unwrap();
    }
    if let Some(e) = e {
        dir.write_exit(&lock, &e).unwrap();
    }
}

/// Whether a tombstone of claim [`TOKEN`] was written (read past any bad line).
fn tombstoned(dir: &RunFiles) -> bool {
    dir.records().unwrap().tombstones.contains(&TOKEN)
}

#[test]
fn a_held_lock_is_alive_and_nothing_is_written() {
    let (_t, dir) = run_dir();
    let _held = dir.try_lock().unwrap().unwrap();
    assert_eq!(settle(&dir, TOKEN, None, true).unwrap(), Fate::Alive);
    assert!(!tombstoned(&dir));
}

#[test]
fn an_exit_record_of_the_claim_is_its_end() {
    let (_t, dir) = run_dir();
    let e = exit(TOKEN, Outcome::Exited, Some(3), None);
    write(&dir, Some(started(TOKEN)), Some(e.clone()));
    assert_eq!(settle(&dir, TOKEN, None, true).unwrap(), Fate::Ended(e));
    assert!(!tombstoned(&dir));
}

#[test]
fn started_without_its_exit_record_is_lost() {
    let (_t, dir) = run_dir();
    // An earlier claim's exit record is no end of this one.
    write(
        &dir,
        Some(started(TOKEN)),
        Some(exit(TOKEN + 1, Outcome::Exited, Some(0), None)),
    );
    assert_eq!(settle(&dir, TOKEN, None, true).unwrap(), Fate::Lost);
    assert!(
        !tombstoned(&dir),
        "a claim that may have started is never tombstoned"
    );
}

#[test]
fn no_started_record_of_the_claim_is_tombstoned_and_never_started() {
    let (_t, dir) = run_dir();
    assert_eq!(settle(&dir, TOKEN, None, true).unwrap(), Fate::NeverStarted);
    assert!(tombstoned(&dir));
    // An earlier claim's started record proves nothing about this one.
    let (_t2, dir2) = run_dir();
    write(&dir2, Some(started(TOKEN + 1)), None);
    assert_eq!(
        settle(&dir2, TOKEN, None, true).unwrap(),
        Fate::NeverStarted
    );
    assert!(dir2.is_tombstoned(TOKEN).unwrap());
    assert!(!dir2.is_tombstoned(TOKEN + 1).unwrap());
}

/// After a restart of the machine (`start_survives` false), a claim with no `started` record
/// proves nothing: the record is written without a sync, and the restart may have lost it. The
/// claim is `start_unknown` (it ends `lost`), never queued again as if its command never ran,
/// and is tombstoned all the same (a restart that cannot be ruled out may not have happened,
/// and a late shim must not start it). A `started` record that did reach the disk still counts.
#[test]
fn after_a_restart_no_started_record_is_a_start_unknown() {
    let (_t, dir) = run_dir();
    assert_eq!(
        settle(&dir, TOKEN, None, false).unwrap(),
        Fate::StartUnknown
    );
    assert!(tombstoned(&dir));
    let t = transition(5, TOKEN, 1, &Fate::StartUnknown, RetryPolicy::NONE, 0).unwrap();
    match t.change {
        Change::Finish { status, reason, .. } => {
            assert_eq!(status, RunStatus::Lost);
            assert!(reason.unwrap().contains("machine may have restarted"));
        }
        other => panic!("{other:?}"),
    }
    let (_t2, dir2) = run_dir();
    write(&dir2, Some(started(TOKEN)), None);
    assert_eq!(settle(&dir2, TOKEN, None, false).unwrap(), Fate::Lost);
}

/// Records that cannot be read (here: a folder where the overflow file should be, as an I/O
/// error of any kind would do) are not missing ones: the exit status may be in them.
#[test]
fn an_unreadable_exit_record_is_an_error_not_lost() {
    let (_t, dir) = run_dir();
    write(&dir, Some(started(TOKEN)), None);
    unreadable_overflow(&dir);
    assert!(settle(&dir, TOKEN, None, true).is_err());
}

/// An unreadable `started` record may say the command started: requeueing (and tombstoning)
/// would start it a second time.
#[test]
fn an_unreadable_started_record_is_an_error_and_no_tombstone() {
    let (_t, dir) = run_dir();
    unreadable_overflow(&dir);
    assert!(settle(&dir, TOKEN, None, true).is_err());
    fs::remove_dir(dir.more_path()).unwrap();
    assert!(!tombstoned(&dir));
}

/// Appends a complete line that is not a record to the run's slot.
fn append_garbage(dir: &RunFiles) {
    use std::os::unix::fs::FileExt;
    let slot = dir.record_slot();
    let segment = slot.open(true).unwrap();
    let used = slot.read(&segment).unwrap().len() as u64;
    segment
        .write_all_at(b"garbage line\n", slot.range().start + used)
        .unwrap();
}

/// A bad line before the exit record hides nothing: the real end counts.
#[test]
fn an_exit_record_after_a_bad_line_is_the_end() {
    let (_t, dir) = run_dir();
    write(&dir, Some(started(TOKEN)), None);
    append_garbage(&dir);
    let e = exit(TOKEN, Outcome::Exited, Some(7), None);
    write(&dir, None, Some(e.clone()));
    assert_eq!(settle(&dir, TOKEN, None, true).unwrap(), Fate::Ended(e));
}

/// No exit record but a bad line that may have been it: the end is unknown, and the note says
/// a record could not be read (naming the line), never that the shim died.
#[test]
fn a_bad_line_where_the_exit_may_be_is_unreadable_not_a_dead_shim() {
    let (_t, dir) = run_dir();
    write(&dir, Some(started(TOKEN)), None);
    append_garbage(&dir);
    let fate = settle(&dir, TOKEN, None, true).unwrap();
    let Fate::Unreadable(what) = &fate else {
        panic!("{fate:?}")
    };
    assert!(what.starts_with("line 2 of "), "{what}");
    assert!(!tombstoned(&dir));
    let t = transition(
        5,
        TOKEN,
        1,
        &fate,
        RetryPolicy {
            retries: 0,
            backoff_ms: 0,
        },
        0,
    )
    .unwrap();
    let Change::Finish { status, reason, .. } = t.change else {
        panic!("{:?}", t.change)
    };
    assert_eq!(status, RunStatus::Lost);
    let reason = reason.unwrap();
    assert!(reason.contains("could not be read (line 2 of "), "{reason}");
    assert!(!reason.contains("shim died"), "{reason}");
}

/// A bad line where the started record may be: the command may have started, so the claim is
/// never requeued (no tombstone).
#[test]
fn a_bad_line_where_the_started_may_be_is_never_requeued() {
    let (_t, dir) = run_dir();
    append_garbage(&dir);
    assert!(matches!(
        settle(&dir, TOKEN, None, true).unwrap(),
        Fate::Unreadable(_)
    ));
    assert!(!tombstoned(&dir));
}

/// The tombstone must be durable before the requeue it licenses: a failed write is an error,
/// never a `NeverStarted`. Here the write goes to the overflow file (one exists), where a
/// symbolic link stands that the writer refuses to follow; reading takes the dangling link for
/// no file at all.
#[test]
fn a_tombstone_that_cannot_be_written_is_an_error() {
    let (t, dir) = run_dir();
    std::os::unix::fs::symlink(t.path().join("nowhere"), dir.more_path()).unwrap();
    assert_eq!(dir.records().unwrap(), Records::default());
    assert!(settle(&dir, TOKEN, None, true).is_err());
    fs::remove_file(dir.more_path()).unwrap();
    assert!(!tombstoned(&dir));
}

#[test]
fn outcome_maps_each_ending_to_its_status() {
    let ok = exit(TOKEN, Outcome::Exited, Some(0), None);
    assert_eq!(outcome(&ok), (RunStatus::Succeeded, Some(0), None, None));
    let three = exit(TOKEN, Outcome::Exited, Some(3), None);
    assert_eq!(outcome(&three), (RunStatus::Failed, Some(3), None, None));
    let killed = exit(TOKEN, Outcome::Signalled, None, Some(9));
    assert_eq!(
        outcome(&killed),
        (
            RunStatus::Failed,
            None,
            Some(9),
            Some("killed by signal 9".into())
        )
    );
    let mut spawn = exit(TOKEN, Outcome::SpawnFailed, None, None);
    spawn.error = Some("no such file".into());
    assert_eq!(
        outcome(&spawn),
        (RunStatus::Failed, None, None, Some("no such file".into()))
    );
    spawn.error = None;
    assert_eq!(outcome(&spawn).0, RunStatus::Failed);
    assert!(
        outcome(&spawn).3.is_some(),
        "a spawn failure always says why"
    );

    // A timeout is the shim's own; a termination request is a cancel. The timeout wins when both
    // are set (it fired first).
    let mut t = exit(TOKEN, Outcome::Signalled, None, Some(15));
    t.timed_out = true;
    assert_eq!(
        outcome(&t),
        (
            RunStatus::TimedOut,
            None,
            Some(15),
            Some("timeout expired".into())
        )
    );
    t.term_requested = true;
    assert_eq!(outcome(&t).0, RunStatus::TimedOut);
    let mut c = exit(TOKEN, Outcome::Exited, Some(0), None);
    c.term_requested = true;
    assert_eq!(outcome(&c), (RunStatus::Cancelled, Some(0), None, None));
}

#[test]
fn transition_for_each_fate() {
    let policy = RetryPolicy {
        retries: 1,
        backoff_ms: 1_000,
    };
    let now = 1_000_000;
    assert_eq!(transition(5, TOKEN, 1, &Fate::Alive, policy, now), None);

    let t = transition(5, TOKEN, 1, &Fate::NeverStarted, policy, now).unwrap();
    assert_eq!((t.run_id, t.token), (5, TOKEN));
    assert!(matches!(t.change, Change::Requeue { .. }), "{t:?}");

    let t = transition(5, TOKEN, 1, &Fate::Lost, policy, now).unwrap();
    match t.change {
        Change::Finish {
            status,
            retry,
            finished_at,
            ..
        } => {
            assert_eq!(status, RunStatus::Lost);
            assert!(retry.is_some_and(|r| r >= now + 1_000), "{retry:?}");
            assert_eq!(finished_at, None);
        }
        other => panic!("{other:?}"),
    }
    // The last attempt gets no retry.
    let t = transition(5, TOKEN, 2, &Fate::Lost, policy, now).unwrap();
    assert!(
        matches!(t.change, Change::Finish { retry: None, .. }),
        "{t:?}"
    );

    let e = exit(TOKEN, Outcome::Exited, Some(3), None);
    let at = e.finished_ms();
    assert!(at.is_some());
    let t = transition(5, TOKEN, 1, &Fate::Ended(e), policy, now).unwrap();
    assert_eq!(
        t.change,
        Change::Finish {
            status: RunStatus::Failed,
            exit_code: Some(3),
            signal: None,
            reason: None,
            retry: policy.next(RunStatus::Failed, 1, now),
            finished_at: at,
        }
    );
    let ok = exit(TOKEN, Outcome::Exited, Some(0), None);
    let t = transition(5, TOKEN, 1, &Fate::Ended(ok), policy, now).unwrap();
    assert!(
        matches!(
            t.change,
            Change::Finish {
                status: RunStatus::Succeeded,
                retry: None,
                ..
            }
        ),
        "{t:?}"
    );
}

/// What a claim's started record says decides between a requeue and `lost`: only a record
/// that is surely absent may requeue; one that cannot be read stops the settling.
#[test]
fn only_a_missing_started_record_requeues() {
    let (_t, dir) = run_dir();
    let more = dir.more_path();

    // Cannot be read (here: a folder where the overflow file should be).
    std::fs::create_dir(&more).unwrap();
    assert!(
        settle(&dir, 1, None, true).is_err(),
        "an unread record is not a missing one"
    );
    std::fs::remove_dir(&more).unwrap();

    // Corrupt: something was written, so the command may have started.
    std::fs::write(&more, "not json\n").unwrap();
    assert!(matches!(
        settle(&dir, 1, None, true).unwrap(),
        Fate::Unreadable(_)
    ));
    std::fs::remove_file(&more).unwrap();

    assert_eq!(settle(&dir, 1, None, true).unwrap(), Fate::NeverStarted);
    assert!(dir.is_tombstoned(1).unwrap());
}
