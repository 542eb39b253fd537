//! Crashes injected at the shim's failpoints leave the run's files in the state the register
//! (`supervisor::failpoints::SHIM`) tells recovery to expect.

use super::*;

fn crash_at(point: &str) -> (Fixture, RunFiles) {
    let f = Fixture::new();
    let fp = format!("{point}=return");
    let args = f.args(3, &["sh", "-c", "touch marker; exit 4"]);
    let (status, _, err) = finish(spawn_shim(&args, &[("FAILPOINTS", &fp)]));
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{point}: {err}");
    let dir = f.dir();
    assert!(
        !dir.is_locked().unwrap(),
        "{point}: the crash frees the lock"
    );
    (f, dir)
}

#[test]
fn crash_before_started_proves_never_started() {
    for point in ["shim-before-lock", "shim-after-lock", "shim-before-started"] {
        let (f, dir) = crash_at(point);
        assert!(dir.read_started().unwrap().is_none(), "{point}");
        assert!(!f.work.join("marker").exists(), "{point}");
    }
}

/// A record torn by a crash mid-write counts as never written: a torn `started` means the
/// command never started, a torn `exit` leaves the run's end unknown (lost); and the next
/// claim's shim cuts the torn line off before appending its own records.
#[test]
fn a_torn_record_counts_as_never_written() {
    let (f, dir) = crash_at("shim-started-record-torn");
    assert!(dir.read_started().unwrap().is_none());
    assert!(!f.work.join("marker").exists());
    let torn = slot_bytes(&dir);
    assert!(
        !torn.is_empty() && !torn.ends_with(b"\n"),
        "a torn line is left"
    );
    let (status, _, err) = finish(spawn_shim(&f.args(4, &["true"]), &[]));
    assert!(status.success(), "{err}");
    let text = String::from_utf8(slot_bytes(&dir)).unwrap();
    assert_eq!(text.lines().count(), 3, "started, running, exit: {text}");
    assert_eq!(dir.read_exit().unwrap().unwrap().token, 4);

    let (f, dir) = crash_at("shim-exit-record-torn");
    assert!(dir.read_started().unwrap().is_some());
    assert!(dir.read_exit().unwrap().is_none());
    assert!(f.work.join("marker").exists());
}

#[test]
fn crash_after_started_leaves_started_without_exit() {
    let (f, dir) = crash_at("shim-after-started");
    assert!(dir.read_started().unwrap().is_some());
    assert!(dir.read_exit().unwrap().is_none());
    assert!(!f.work.join("marker").exists());
}

#[test]
fn crash_after_exit_leaves_started_without_exit() {
    for point in ["shim-after-exit", "shim-before-exit-file"] {
        let (f, dir) = crash_at(point);
        assert!(dir.read_started().unwrap().is_some(), "{point}");
        assert!(dir.read_exit().unwrap().is_none(), "{point}");
        assert!(f.work.join("marker").exists(), "{point}");
    }
}

#[test]
fn crash_after_exit_file_keeps_the_real_status() {
    let (_f, dir) = crash_at("shim-after-exit-file");
    let exit = dir.read_exit().unwrap().unwrap();
    assert_eq!((exit.outcome, exit.code), (Outcome::Exited, Some(4)));
}

/// A record that cannot be written (the first attempts fail, as on a full disk) is retried
/// while the shim keeps its lock, and written in the end: the real status survives, and the
/// shim says how many attempts failed.
#[test]
fn a_record_that_fails_to_write_is_retried_until_written() {
    for (point, record) in [
        ("shim-started-record-fails", "started"),
        ("shim-exit-record-fails", "exit"),
    ] {
        let f = Fixture::new();
        let args = f.args(5, &["sh", "-c", "exit 6"]);
        let fp = format!("{point}=3*return");
        let t = Instant::now();
        let (status, _, err) = finish(spawn_shim(&args, &[("FAILPOINTS", &fp)]));
        // Backoff, not a spin: 50, 100 and 200 ms between the attempts.
        assert!(
            t.elapsed() >= Duration::from_millis(350),
            "{point}: {:?}",
            t.elapsed()
        );
        assert!(status.success(), "{point}: {status:?} {err}");
        let dir = f.dir();
        let exit = dir.read_exit().unwrap().expect("the exit record");
        assert_eq!((exit.outcome, exit.code), (Outcome::Exited, Some(6)));
        assert_eq!(dir.read_started().unwrap().unwrap().token, 5);
        // Reported at the first and second failed attempts (then at doubling counts), and
        // once written.
        assert_eq!(
            err.matches(&format!("could not write the {record} record"))
                .count(),
            2,
            "{point}: {err}"
        );
        assert!(
            err.contains(&format!(
                "the {record} record is written, after 3 failed attempt(s)"
            )),
            "{point}: {err}"
        );
        assert!(!dir.is_locked().unwrap());
    }
}

#[test]
fn late_shim_finds_the_tombstone() {
    // The shim is delayed before its lock; recovery locks, tombstones and lets go meanwhile.
    let f = Fixture::new();
    let dir = f.dir();
    let args = f.args(9, &["sh", "-c", "touch marker"]);
    let shim = spawn_shim(&args, &[("FAILPOINTS", "shim-before-lock=sleep(3000)")]);
    let lock = dir
        .try_lock()
        .unwrap()
        .expect("the delayed shim has not locked yet");
    dir.write_tombstone(&lock, 9).unwrap();
    drop(lock);
    let (status, _, err) = finish(shim);
    assert!(status.success(), "{err}");
    assert!(err.contains("given up by recovery"), "{err}");
    assert!(!f.work.join("marker").exists());
    assert!(dir.read_started().unwrap().is_none());
}
