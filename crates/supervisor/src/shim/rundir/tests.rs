//! Unit tests of the run folder: records, lock, tombstones, log.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn run_dir() -> (tempfile::TempDir, RunDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = RunDir::new(tmp.path(), 42);
    (tmp, dir)
}

#[test]
fn new_does_no_io_and_create_uses_0700() {
    let (tmp, dir) = run_dir();
    assert_eq!(dir.path(), tmp.path().join("runs").join("42"));
    assert_eq!(dir.log_path(), tmp.path().join("runs/42/log"));
    assert!(!dir.path().exists());
    dir.create().unwrap();
    for p in [tmp.path().join("runs"), dir.path().to_path_buf()] {
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o700, 0, "{} has mode {mode:o}", p.display());
    }
    dir.create().unwrap(); // idempotent
}

#[test]
fn records_round_trip_and_missing_is_none() {
    let (_tmp, dir) = run_dir();
    assert_eq!(dir.read_started().unwrap(), None);
    assert_eq!(dir.read_running().unwrap(), None);
    assert_eq!(dir.read_exit().unwrap(), None);
    let lock = dir.try_lock().unwrap().unwrap();
    let started = StartedRecord {
        token: 3,
        shim_pid: 77,
        shim_start_time: 12345,
        at: now_rfc3339(),
        history: vec![],
    };
    let running = RunningRecord {
        token: 3,
        pid: 78,
        at: now_rfc3339(),
    };
    let exit = ExitRecord {
        token: 3,
        outcome: Outcome::SpawnFailed,
        code: None,
        signal: None,
        timed_out: false,
        term_requested: true,
        error: Some("nope".into()),
        started_at: None,
        finished_at: now_rfc3339(),
    };
    dir.write_started(&lock, &started).unwrap();
    dir.write_running(&lock, &running).unwrap();
    dir.write_exit(&lock, &exit).unwrap();
    assert_eq!(dir.read_started().unwrap(), Some(started));
    assert_eq!(dir.read_running().unwrap(), Some(running));
    assert_eq!(dir.read_exit().unwrap(), Some(exit));
    let raw = fs::read_to_string(dir.records_path()).unwrap();
    assert!(raw.contains(r#""record":"exit""#), "{raw}");
    assert!(raw.contains(r#""outcome":"spawn_failed""#), "{raw}");
    // The records live in the lock file: no other file was made for them.
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec![LOCK_FILE.to_string()]);
}

/// The settle tests' started record of claim `token`.
use crate::settle::tests::started;

/// A writer that died mid-line left a torn record: readers skip it, and the next holder of the
/// lock cuts it off before appending, so the file never holds two records run together.
#[test]
fn a_torn_last_line_is_skipped_then_cut_off() {
    let (_tmp, dir) = run_dir();
    let lock = dir.try_lock().unwrap().unwrap();
    dir.write_started(&lock, &started(1)).unwrap();
    let mut f = OpenOptions::new()
        .append(true)
        .open(dir.records_path())
        .unwrap();
    f.write_all(br#"{"record":"exit","token":1,"outc"#).unwrap();
    assert_eq!(dir.read_exit().unwrap(), None, "a torn exit is no exit");
    assert_eq!(dir.read_started().unwrap().unwrap().token, 1);
    dir.write_started(&lock, &started(2)).unwrap();
    let text = fs::read_to_string(dir.records_path()).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(!text.contains("outc"), "{text}");
    assert_eq!(dir.read_started().unwrap().unwrap().token, 2);
}

/// A complete line that is not a record is corruption: an error naming the file, never a
/// record made up or skipped.
#[test]
fn a_complete_line_that_is_not_a_record_is_invalid_data() {
    let (_tmp, dir) = run_dir();
    dir.create().unwrap();
    fs::write(dir.records_path(), b"{\"record\":\"exit\"}\n").unwrap();
    let e = dir.read_exit().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("runs/42/lock"), "{e}");
    assert_eq!(
        dir.read_started().unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
}

/// A bad line hides nothing around it: the records before and after it are read, and the bad
/// line is reported by its number in the file, without the parser's position inside the line.
#[test]
fn a_bad_line_is_set_aside_and_the_records_around_it_count() {
    let (_tmp, dir) = run_dir();
    let lock = dir.try_lock().unwrap().unwrap();
    dir.write_started(&lock, &started(3)).unwrap();
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(dir.records_path())
        .unwrap();
    io::Write::write_all(&mut file, b"garbage line\n").unwrap();
    let exit = ExitRecord {
        token: 3,
        outcome: Outcome::Exited,
        code: Some(7),
        signal: None,
        timed_out: false,
        term_requested: false,
        error: None,
        started_at: None,
        finished_at: now_rfc3339(),
    };
    dir.write_exit(&lock, &exit).unwrap();
    let all = dir.records().unwrap();
    assert_eq!(all.started.unwrap().token, 3);
    assert_eq!(all.exit, Some(exit.clone()));
    assert_eq!(dir.read_exit().unwrap(), Some(exit));
    assert_eq!(all.bad.len(), 1);
    let said = all.bad[0].to_string();
    assert!(said.starts_with("line 2 of "), "{said}");
    assert!(said.contains("runs/42/lock: not a run record ("), "{said}");
    assert!(!said.contains("column"), "{said}");
}

/// A folder of the previous version (one file per record) reads the same; once the record
/// file holds a record of a kind, it wins over the old file of that kind.
#[test]
fn the_previous_layout_is_read_and_appended_records_win() {
    let (_tmp, dir) = run_dir();
    dir.create().unwrap();
    let old = started(1);
    fs::write(
        dir.path().join(STARTED_FILE),
        serde_json::to_vec(&old).unwrap(),
    )
    .unwrap();
    fs::write(
        dir.path().join(RUNNING_FILE),
        br#"{"token":1,"pid":55,"at":"2024-01-01T00:00:00.000Z"}"#,
    )
    .unwrap();
    assert_eq!(dir.read_started().unwrap(), Some(old.clone()));
    assert_eq!(dir.read_running().unwrap().unwrap().pid, 55);
    assert_eq!(dir.read_exit().unwrap(), None);
    let lock = dir.try_lock().unwrap().unwrap();
    dir.write_started(&lock, &started(2)).unwrap();
    let all = dir.records().unwrap();
    assert_eq!(all.started.unwrap().token, 2);
    assert_eq!(all.running.unwrap().token, 1, "no newer running record");
}

#[test]
fn corrupt_json_is_an_error_not_a_panic() {
    let (_tmp, dir) = run_dir();
    dir.create().unwrap();
    fs::write(dir.path().join(STARTED_FILE), b"{\"token\": 1, \"shim").unwrap();
    fs::write(dir.path().join(EXIT_FILE), b"[]").unwrap();
    let e = dir.read_started().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert_eq!(
        dir.read_exit().unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
}

#[test]
fn lock_is_exclusive_and_released_on_drop() {
    let (_tmp, dir) = run_dir();
    assert!(!dir.is_locked().unwrap(), "no lock file means not locked");
    let lock = dir.try_lock().unwrap().expect("free lock");
    assert!(dir.is_locked().unwrap());
    assert!(dir.try_lock().unwrap().is_none());
    drop(lock);
    assert!(!dir.is_locked().unwrap());
    let again = dir.lock_blocking().unwrap();
    assert_eq!(again.dir(), dir.path());
}

#[test]
fn lock_file_is_close_on_exec() {
    let (_tmp, dir) = run_dir();
    let lock = dir.try_lock().unwrap().unwrap();
    assert!(crate::sys::files::is_close_on_exec(&lock.file).unwrap());
}

#[test]
fn tombstones_compare_tokens_and_survive_torn_lines() {
    let (_tmp, dir) = run_dir();
    assert!(!dir.is_tombstoned(5).unwrap());
    let lock = dir.try_lock().unwrap().unwrap();
    dir.write_tombstone(&lock, 5).unwrap();
    dir.write_tombstone(&lock, 9).unwrap();
    assert!(dir.is_tombstoned(5).unwrap());
    assert!(dir.is_tombstoned(9).unwrap());
    assert!(!dir.is_tombstoned(6).unwrap());
    // A crashed writer left "12" of "123" without its newline: not a tombstone for 12 …
    let path = dir.path().join(TOMBSTONES_FILE);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"12").unwrap();
    assert!(!dir.is_tombstoned(12).unwrap());
    // … and the next append does not glue onto it.
    dir.write_tombstone(&lock, 7).unwrap();
    assert!(dir.is_tombstoned(7).unwrap());
    assert!(
        dir.is_tombstoned(12).unwrap(),
        "the torn line is now complete"
    );
    assert!(!dir.is_tombstoned(127).unwrap());
    fs::write(&path, b"5\nbanana\n").unwrap();
    assert_eq!(
        dir.is_tombstoned(5).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
}

#[test]
fn writes_require_this_runs_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let a = RunDir::new(tmp.path(), 1);
    let b = RunDir::new(tmp.path(), 2);
    let lock_a = a.try_lock().unwrap().unwrap();
    let e = b.write_tombstone(&lock_a, 1).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    b.create().unwrap();
    assert!(!b.is_tombstoned(1).unwrap());
}

/// A lock file or tombstones that cannot be read are errors, never "not locked" (the shim would
/// pass for dead) or "not tombstoned" (a late shim would start a requeued run): fail closed.
#[test]
fn unreadable_lock_or_tombstones_are_errors() {
    let (_tmp, dir) = run_dir();
    dir.create().unwrap();
    fs::create_dir(dir.path().join(LOCK_FILE)).unwrap();
    assert!(dir.is_locked().is_err(), "a lock that cannot be opened");
    fs::create_dir(dir.path().join(TOMBSTONES_FILE)).unwrap();
    assert!(
        dir.is_tombstoned(1).is_err(),
        "tombstones that cannot be read"
    );
}

#[test]
fn list_run_ids_lists_numeric_folders() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(list_run_ids(tmp.path()).unwrap(), Vec::<i64>::new());
    for id in [10, 2, 33] {
        RunDir::new(tmp.path(), id).create().unwrap();
    }
    fs::create_dir(tmp.path().join("runs/notanumber")).unwrap();
    fs::write(tmp.path().join("runs/7"), b"a file").unwrap();
    assert_eq!(list_run_ids(tmp.path()).unwrap(), vec![2, 10, 33]);
}

#[test]
fn log_is_appended() {
    let (_tmp, dir) = run_dir();
    dir.create().unwrap();
    dir.open_log().unwrap().write_all(b"one\n").unwrap();
    dir.open_log().unwrap().write_all(b"two\n").unwrap();
    assert_eq!(fs::read_to_string(dir.log_path()).unwrap(), "one\ntwo\n");
    let mode = fs::metadata(dir.log_path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & !0o600, 0);
}
