//! Unit tests of a run's files: records, lock, tombstones, log, and the listing of `runs/`.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};

use super::*;

fn run_dir() -> (tempfile::TempDir, RunFiles) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = RunFiles::new(tmp.path(), 42);
    (tmp, dir)
}

/// The bytes of `dir`'s slot, as text.
fn slot_text(dir: &RunFiles) -> String {
    String::from_utf8(dir.slot_bytes().unwrap()).unwrap()
}

/// Writes `bytes` into `dir`'s slot after what it holds (making the segment), as another
/// writer or a damaged disk would: no line checks, no zeros after.
fn put_in_slot(dir: &RunFiles, bytes: &[u8]) {
    let slot = dir.record_slot();
    let segment = slot.open(true).unwrap();
    let used = slot.read(&segment).unwrap().len() as u64;
    segment
        .write_all_at(bytes, slot.range().start + used)
        .unwrap();
}

/// The names in `runs/`, sorted.
fn names_in_runs(tmp: &tempfile::TempDir) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(tmp.path().join(RUNS_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn new_does_no_io_and_runs_is_made_0700() {
    let (tmp, dir) = run_dir();
    assert_eq!(dir.lock_path(), tmp.path().join("runs/records-0"));
    assert_eq!(dir.more_path(), tmp.path().join("runs/42.more"));
    assert_eq!(dir.log_path(), tmp.path().join("runs/42.log"));
    assert!(!tmp.path().join("runs").exists());
    assert!(!dir.exists().unwrap());
    let lock = dir.lock_blocking().unwrap();
    let mode = fs::metadata(tmp.path().join("runs"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
    let mode = fs::metadata(dir.lock_path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // The segment's header says its entry in `runs/` is durable; the slot is still empty, so
    // the run has no files yet.
    let head = fs::read(dir.lock_path()).unwrap();
    assert!(head.starts_with(crate::slot::HEADER), "{head:?}");
    assert!(!dir.exists().unwrap());
    dir.write_running(
        &lock,
        &RunningRecord {
            token: 1,
            pid: 2,
            at: now_rfc3339(),
        },
    )
    .unwrap();
    assert!(dir.exists().unwrap());
    drop(lock);
    dir.create_runs_dir().unwrap(); // idempotent
}

#[test]
fn records_round_trip_and_missing_is_none() {
    let (tmp, dir) = run_dir();
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
        repeats: None,
    };
    dir.write_started(&lock, &started).unwrap();
    dir.write_running(&lock, &running).unwrap();
    dir.write_exit(&lock, &exit).unwrap();
    assert_eq!(dir.read_started().unwrap(), Some(started));
    assert_eq!(dir.read_running().unwrap(), Some(running));
    assert_eq!(dir.read_exit().unwrap(), Some(exit));
    let raw = slot_text(&dir);
    assert!(raw.contains(r#""record":"exit""#), "{raw}");
    assert!(raw.contains(r#""outcome":"spawn_failed""#), "{raw}");
    assert_eq!(raw.lines().count(), 3, "{raw}");
    // The records live in the run's slot of a shared segment: no file of the run's own.
    assert_eq!(names_in_runs(&tmp), vec!["records-0".to_string()]);
}

/// A started record of claim `token`.
fn started(token: u64) -> StartedRecord {
    StartedRecord {
        token,
        shim_pid: 1,
        shim_start_time: 1,
        at: now_rfc3339(),
        history: vec![token],
    }
}

/// A writer that died mid-line left a torn record: readers skip it, and the next holder of the
/// lock cuts it off before appending, so the file never holds two records run together.
#[test]
fn a_torn_last_line_is_skipped_then_cut_off() {
    let (_tmp, dir) = run_dir();
    let lock = dir.try_lock().unwrap().unwrap();
    dir.write_started(&lock, &started(1)).unwrap();
    put_in_slot(&dir, br#"{"record":"exit","token":1,"outc"#);
    assert_eq!(dir.read_exit().unwrap(), None, "a torn exit is no exit");
    assert_eq!(dir.read_started().unwrap().unwrap().token, 1);
    dir.write_started(&lock, &started(2)).unwrap();
    let text = slot_text(&dir);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(!text.contains("outc"), "{text}");
    assert_eq!(dir.read_started().unwrap().unwrap().token, 2);
}

/// A complete line that is not a record is corruption: an error naming the file, never a
/// record made up or skipped.
#[test]
fn a_complete_line_that_is_not_a_record_is_invalid_data() {
    let (_tmp, dir) = run_dir();
    put_in_slot(&dir, b"{\"record\":\"exit\"}\n");
    let e = dir.read_exit().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("runs/records-0"), "{e}");
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
    put_in_slot(&dir, b"garbage line\n");
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
        repeats: None,
    };
    dir.write_exit(&lock, &exit).unwrap();
    let all = dir.records().unwrap();
    assert_eq!(all.started.unwrap().token, 3);
    assert_eq!(all.exit, Some(exit.clone()));
    assert_eq!(dir.read_exit().unwrap(), Some(exit));
    assert_eq!(all.bad.len(), 1);
    let said = all.bad[0].to_string();
    assert!(said.starts_with("line 2 of "), "{said}");
    assert!(
        said.contains("runs/records-0 (record slot of run 42): not a run record ("),
        "{said}"
    );
    assert!(!said.contains("column"), "{said}");
}

/// An exit record of claim `token` with `code`.
fn exit_of(token: u64, code: i32) -> ExitRecord {
    ExitRecord {
        token,
        outcome: Outcome::Exited,
        code: Some(code),
        signal: None,
        timed_out: false,
        term_requested: false,
        error: None,
        started_at: None,
        finished_at: now_rfc3339(),
        repeats: None,
    }
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
    assert_eq!(again.path(), dir.lock_path());
}

/// Runs that share a segment lock and write apart: one's lock never stands for another's,
/// and each slot holds its own run's records.
#[test]
fn neighbours_in_a_segment_are_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let a = RunFiles::new(tmp.path(), 1);
    let b = RunFiles::new(tmp.path(), 2);
    let far = RunFiles::new(tmp.path(), 1025);
    assert_eq!(a.lock_path(), b.lock_path());
    assert_ne!(a.lock_path(), far.lock_path());
    let lock_a = a.try_lock().unwrap().unwrap();
    assert!(a.is_locked().unwrap());
    assert!(!b.is_locked().unwrap(), "a's lock is not b's");
    let lock_b = b.try_lock().unwrap().expect("b's slot is free");
    a.write_started(&lock_a, &started(1)).unwrap();
    b.write_started(&lock_b, &started(2)).unwrap();
    b.write_exit(&lock_b, &exit_of(2, 0)).unwrap();
    drop(lock_b);
    assert!(a.is_locked().unwrap() && !b.is_locked().unwrap());
    assert_eq!(a.read_started().unwrap().unwrap().token, 1);
    assert_eq!(a.read_exit().unwrap(), None);
    assert_eq!(b.read_started().unwrap().unwrap().token, 2);
    let segment = a.lock_path();
    assert_eq!(crate::slot::held_ids(&segment, 0).unwrap(), vec![1]);
    assert_eq!(crate::slot::used_ids(&segment, 0).unwrap(), vec![1, 2]);
    drop(lock_a);
    assert_eq!(
        crate::slot::held_ids(&segment, 0).unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(list_run_ids(tmp.path()).unwrap(), vec![1, 2]);
}

/// Records that outgrow the slot go to `<id>.more`, and every later one follows them there, so
/// that reading the slot then the overflow keeps their order.
#[test]
fn records_that_outgrow_the_slot_go_on_in_the_overflow() {
    let (tmp, dir) = run_dir();
    let lock = dir.try_lock().unwrap().unwrap();
    let tokens: Vec<u64> = (1..=80).collect();
    for &t in &tokens {
        dir.write_tombstone(&lock, t).unwrap();
    }
    assert!(dir.more_path().is_file(), "{:?}", names_in_runs(&tmp));
    assert!(slot_text(&dir).len() <= crate::slot::SLOT_LEN as usize);
    drop(lock);
    let lock = dir.try_lock().unwrap().unwrap();
    dir.write_started(&lock, &started(99)).unwrap();
    dir.write_exit(&lock, &exit_of(99, 3)).unwrap();
    let all = dir.records().unwrap();
    assert_eq!(all.tombstones, tokens, "every tombstone, in order");
    assert_eq!(all.started.unwrap().token, 99);
    assert_eq!(all.exit.unwrap().code, Some(3));
    assert!(
        !slot_text(&dir).contains(r#""token":99"#),
        "after the overflow, records go on there"
    );
    assert!(list_run_ids(tmp.path()).unwrap().contains(&42));
    // Prune keeps every tombstone, those past the slot in the overflow.
    dir.remove(lock).unwrap();
    assert!(dir.more_path().is_file());
    assert_eq!(dir.records().unwrap().tombstones, tokens);
    assert!(dir.only_tombstones().unwrap());
}

#[test]
fn lock_file_is_close_on_exec() {
    let (_tmp, dir) = run_dir();
    let lock = dir.try_lock().unwrap().unwrap();
    let flags = rustix::io::fcntl_getfd(&lock.file).unwrap();
    assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
}

/// A tombstone is a record in the run's slot, under the run's lock: it is read back for its
/// claim alone, and makes no file of the run's own.
#[test]
fn tombstones_are_records_in_the_slot() {
    let (tmp, dir) = run_dir();
    assert!(!dir.is_tombstoned(5).unwrap());
    let lock = dir.try_lock().unwrap().unwrap();
    dir.write_tombstone(&lock, 5).unwrap();
    dir.write_tombstone(&lock, 9).unwrap();
    assert!(dir.is_tombstoned(5).unwrap());
    assert!(dir.is_tombstoned(9).unwrap());
    assert!(!dir.is_tombstoned(6).unwrap());
    assert_eq!(dir.records().unwrap().tombstones, vec![5, 9]);
    assert_eq!(names_in_runs(&tmp), vec!["records-0"]);
    assert_eq!(slot_text(&dir).lines().count(), 2);
}

/// A bad line in the slot may have been a tombstone: a claim not found tombstoned there is an
/// error (the shim refuses to start), never "not tombstoned".
#[test]
fn a_bad_line_fails_the_tombstone_check_closed() {
    let (_tmp, dir) = run_dir();
    put_in_slot(
        &dir,
        b"{\"record\":\"tombstone\",\"token\":3,\"at\":\"x\"}\nnope\n",
    );
    assert!(dir.is_tombstoned(3).unwrap(), "found before the bad line");
    assert_eq!(
        dir.is_tombstoned(4).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
}

#[test]
fn writes_require_this_runs_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let a = RunFiles::new(tmp.path(), 1);
    let b = RunFiles::new(tmp.path(), 2);
    let lock_a = a.try_lock().unwrap().unwrap();
    // Both slots are in one segment: the lock is told apart by its run, not its file.
    assert_eq!(a.lock_path(), b.lock_path());
    let e = b.write_tombstone(&lock_a, 1).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = b.write_started(&lock_a, &started(1)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(!b.is_tombstoned(1).unwrap());
    assert!(!b.exists().unwrap());
}

/// A segment or an overflow file that cannot be read are errors, never "not locked" (the shim would
/// pass for dead) or "not tombstoned" (a late shim would start a requeued run): fail closed.
#[test]
fn unreadable_lock_or_tombstones_are_errors() {
    let (_tmp, dir) = run_dir();
    fs::create_dir_all(dir.lock_path()).unwrap();
    assert!(dir.is_locked().is_err(), "a lock that cannot be opened");
    assert!(
        dir.is_tombstoned(1).is_err(),
        "a lock file that cannot be read"
    );
    fs::remove_dir(dir.lock_path()).unwrap();
    fs::create_dir(dir.more_path()).unwrap();
    assert!(
        dir.is_tombstoned(1).is_err(),
        "an overflow file that cannot be read"
    );
}

/// Every run with files is listed once; names fleet does not write (the lock files and
/// folders of layouts that never shipped among them) are no run's.
#[test]
fn list_run_ids_lists_every_run_once() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(list_run_ids(tmp.path()).unwrap(), Vec::<i64>::new());
    // A slot locked but empty is no run's files; one with a record is.
    drop(RunFiles::new(tmp.path(), 3).lock_blocking().unwrap());
    for id in [10, 2, 2050] {
        let run = RunFiles::new(tmp.path(), id);
        let lock = run.lock_blocking().unwrap();
        run.write_started(&lock, &started(1)).unwrap();
    }
    fs::write(tmp.path().join("runs/12.more"), b"").unwrap();
    fs::write(tmp.path().join("runs/13.lock"), b"").unwrap();
    RunFiles::new(tmp.path(), 2).open_log().unwrap();
    fs::create_dir(tmp.path().join("runs/33")).unwrap();
    fs::create_dir(tmp.path().join("runs/10")).unwrap();
    fs::write(tmp.path().join("runs/5.log"), b"a log alone").unwrap();
    fs::create_dir(tmp.path().join("runs/notanumber")).unwrap();
    fs::write(tmp.path().join("runs/7"), b"a file").unwrap();
    fs::write(tmp.path().join("runs/8.lock.tmp"), b"").unwrap();
    fs::write(tmp.path().join("runs/x.lock"), b"").unwrap();
    for stray in [
        "-5.log",
        "+6.more",
        "007.log",
        "0.log",
        "9.log.compacting",
        "records-5",
        "records-01024",
        "records-x",
    ] {
        fs::write(tmp.path().join("runs").join(stray), b"").unwrap();
    }
    fs::create_dir(tmp.path().join("runs/011")).unwrap();
    fs::create_dir(tmp.path().join("runs/records-4096")).unwrap();
    let all = vec![2, 5, 10, 12, 2050];
    assert_eq!(list_run_ids(tmp.path()).unwrap(), all);
    // A plain file named like a high id is not a run's, nor a name fleet does not write.
    fs::write(tmp.path().join("runs/99"), b"a file").unwrap();
    fs::write(tmp.path().join("runs/099.log"), b"").unwrap();
    assert_eq!(list_run_ids(tmp.path()).unwrap(), all);
    let empty = tempfile::tempdir().unwrap();
    assert!(list_run_ids(empty.path()).unwrap().is_empty());
}

#[test]
fn log_is_appended() {
    let (_tmp, dir) = run_dir();
    dir.create_runs_dir().unwrap();
    dir.open_log().unwrap().write_all(b"one\n").unwrap();
    dir.open_log().unwrap().write_all(b"two\n").unwrap();
    assert_eq!(fs::read_to_string(dir.log_path()).unwrap(), "one\ntwo\n");
    let mode = fs::metadata(dir.log_path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & !0o600, 0);
    assert!(dir.log_path().ends_with("runs/42.log"));
}

/// Removal under the lock takes every file of the run, empties its slot, and leaves other runs alone (their slots in the same segment too).
#[test]
fn remove_takes_every_file() {
    let (tmp, dir) = run_dir();
    let other = RunFiles::new(tmp.path(), 420);
    let other_lock = other.lock_blocking().unwrap();
    other.write_started(&other_lock, &started(5)).unwrap();
    drop(other_lock);
    let lock = dir.try_lock().unwrap().unwrap();
    dir.write_started(&lock, &started(1)).unwrap();
    dir.open_log().unwrap().write_all(b"x\n").unwrap();
    fs::write(RunFiles::compacting_path(&dir.log_path()), b"y").unwrap();
    dir.write_tombstone(&lock, 9).unwrap();
    assert!(!dir.only_tombstones().unwrap());
    dir.remove(lock).unwrap();
    assert_eq!(names_in_runs(&tmp), vec!["records-0".to_string()]);
    assert_eq!(other.read_started().unwrap().unwrap().token, 5);
    // Its tombstone stays, alone, for a late shim of the claim it gave up …
    assert!(dir.is_tombstoned(9).unwrap());
    assert!(dir.only_tombstones().unwrap());
    let all = dir.records().unwrap();
    assert_eq!((all.started, all.exit), (None, None));
    // … and a run without any leaves nothing.
    let lock = other.try_lock().unwrap().unwrap();
    other.remove(lock).unwrap();
    assert!(!other.exists().unwrap());
    assert_eq!(slot_text(&other), "");
    assert!(!other.only_tombstones().unwrap());
}

/// Messages name the files a run has: its slot, its files of its own, or both.
#[test]
fn describe_names_what_exists() {
    let (tmp, dir) = run_dir();
    let slot = format!(
        "record slot of run 42 in {}",
        tmp.path().join("runs/records-0").display()
    );
    let flat = format!("{}", tmp.path().join("runs/42.*").display());
    assert_eq!(dir.describe(), slot);
    dir.create_runs_dir().unwrap();
    dir.open_log().unwrap();
    assert_eq!(dir.describe(), flat);
    let lock = dir.lock_blocking().unwrap();
    dir.write_started(&lock, &started(1)).unwrap();
    assert_eq!(dir.describe(), format!("{slot} and {flat}"));
}

/// A symbolic link planted where a run's log or segment goes is not followed: the command's
/// output and the records never land in whatever it points at.
#[test]
fn links_in_place_of_run_files_are_not_followed() {
    let (tmp, dir) = run_dir();
    dir.create_runs_dir().unwrap();
    let target = tmp.path().join("elsewhere");
    fs::write(&target, b"").unwrap();
    std::os::unix::fs::symlink(&target, dir.log_path()).unwrap();
    assert!(dir.open_log().is_err());
    std::os::unix::fs::symlink(&target, dir.lock_path()).unwrap();
    assert!(dir.lock_blocking().is_err());
    assert!(dir.try_lock().is_err());
    assert_eq!(fs::read(&target).unwrap(), b"");
}

/// The highest ids read only as far down the segments as needed, with the ids of files of
/// their own; the live candidates are the held record slots alone.
#[test]
fn highest_ids_and_live_candidates() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(highest_run_ids(tmp.path(), 3).unwrap().is_empty());
    for id in [1, 5, 1023, 1024, 2000, 3100] {
        let run = RunFiles::new(tmp.path(), id);
        let lock = run.lock_blocking().unwrap();
        run.write_started(&lock, &started(1)).unwrap();
    }
    // An empty segment above the others (locked once, nothing written) holds no run.
    drop(RunFiles::new(tmp.path(), 5000).lock_blocking().unwrap());
    fs::write(tmp.path().join("runs/1500.log"), b"").unwrap();
    assert_eq!(
        highest_run_ids(tmp.path(), 3).unwrap(),
        vec![1500, 2000, 3100]
    );
    assert_eq!(highest_run_ids(tmp.path(), 1).unwrap(), vec![3100]);
    assert_eq!(
        highest_run_ids(tmp.path(), 100).unwrap(),
        list_run_ids(tmp.path()).unwrap()
    );

    assert!(live_run_candidates(tmp.path()).unwrap().is_empty());
    let alive = RunFiles::new(tmp.path(), 1024).lock_blocking().unwrap();
    let other = RunFiles::new(tmp.path(), 7).lock_blocking().unwrap();
    fs::write(tmp.path().join("runs/9.lock"), b"").unwrap();
    fs::create_dir(tmp.path().join("runs/11")).unwrap();
    assert_eq!(live_run_candidates(tmp.path()).unwrap(), vec![7, 1024]);
    drop((alive, other));
    assert!(live_run_candidates(tmp.path()).unwrap().is_empty());
}

/// A segment is read where it holds data: the record slots of pruned runs are holes, skipped,
/// and the runs around them are still found.
#[test]
fn pruned_slots_are_holes_and_skipped() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    for id in [1, 2, 500, 1023] {
        let run = RunFiles::new(tmp.path(), id);
        let lock = run.lock_blocking().unwrap();
        run.write_started(&lock, &started(1)).unwrap();
    }
    let segment = RunFiles::new(tmp.path(), 1).lock_path();
    let blocks = |p: &std::path::Path| fs::metadata(p).unwrap().blocks();
    let before = blocks(&segment);
    for id in [2, 500] {
        let run = RunFiles::new(tmp.path(), id);
        let lock = run.try_lock().unwrap().unwrap();
        run.remove(lock).unwrap();
    }
    assert!(
        blocks(&segment) < before,
        "pruned record slots give their blocks back"
    );
    assert_eq!(crate::slot::used_ids(&segment, 0).unwrap(), vec![1, 1023]);
    assert_eq!(
        crate::slot::used_ids_from_top(&segment, 0, 1).unwrap(),
        vec![1023]
    );
    for id in [1, 1023] {
        let run = RunFiles::new(tmp.path(), id);
        let lock = run.try_lock().unwrap().unwrap();
        run.remove(lock).unwrap();
    }
    assert!(crate::slot::used_ids(&segment, 0).unwrap().is_empty());
    assert!(list_run_ids(tmp.path()).unwrap().is_empty());
}

/// What a shim about to start claim 3 learns: the earlier claim's end only when the files hold
/// the end of the very claim whose `started` record they hold — never another claim's end (a
/// claim refused earlier), nor its own.
#[test]
fn before_start_names_the_end_of_the_claim_that_started_only() {
    let (_tmp, dir) = run_dir();
    let lock = dir.try_lock().unwrap().unwrap();
    let before = dir.before_start(&lock, 3).unwrap();
    assert!(!before.tombstoned);
    assert_eq!(before.earlier.unwrap(), None);
    assert_eq!(before.earlier_end, None);
    dir.write_started(&lock, &started(1)).unwrap();
    let before = dir.before_start(&lock, 3).unwrap();
    assert_eq!(before.earlier.unwrap().unwrap().token, 1);
    assert_eq!(before.earlier_end, None, "claim 1 has no end yet");
    // Claim 2 was refused (its end is on record, but it started nothing).
    dir.write_exit(&lock, &exit_of(2, 0)).unwrap();
    let before = dir.before_start(&lock, 3).unwrap();
    assert_eq!(before.earlier_end, None, "claim 2's end is not claim 1's");
    // Claim 3's own end (a shim of claim 3 started again): not an earlier claim's.
    dir.write_exit(&lock, &exit_of(3, 0)).unwrap();
    assert_eq!(dir.before_start(&lock, 3).unwrap().earlier_end, None);
    dir.write_exit(&lock, &exit_of(1, 4)).unwrap();
    let before = dir.before_start(&lock, 3).unwrap();
    assert_eq!(
        before.earlier_end.map(|e| (e.token, e.code)),
        Some((1, Some(4)))
    );
    dir.write_tombstone(&lock, 3).unwrap();
    assert!(dir.before_start(&lock, 3).unwrap().tombstoned);
}
