//! The daemon lock of a state directory: one holder at a time (one schedule runner per
//! install), a refusal that names the holder, the holder's identity written for readers that
//! must never touch the lock, and the lock free again once its holder lets it go.
//!
//! A second open file description in the same process contends for an `flock` as another
//! process would, so these run in-process.

use std::fs::OpenOptions;
use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

use supervisor::statedir::{StateDir, StateDirError, HOLDER_GONE_WAIT};
use supervisor::sys::files;

fn state_dir() -> (tempfile::TempDir, StateDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = StateDir::new(tmp.path().join("state"));
    (tmp, dir)
}

/// The daemon lock of `dir` taken through an open file description of its own, as another
/// process would hold it, whatever the file says; held while the file is open.
fn held_by_another(dir: &StateDir) -> std::fs::File {
    let copy = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.lock_path())
        .unwrap();
    assert!(files::try_lock_exclusive(&copy).unwrap());
    copy
}

#[test]
fn a_second_holder_is_refused_naming_the_first() {
    let (_t, dir) = state_dir();
    let held = dir.lock_daemon().expect("the first daemon takes the lock");
    let me = std::process::id() as i32;
    match dir.lock_daemon() {
        Err(StateDirError::Held { pid, path, exiting }) => {
            assert_eq!(pid, Some(me), "the refusal names the holder");
            assert_eq!(path, dir.root());
            assert!(!exiting, "a live holder is refused as such");
        }
        other => panic!("a second daemon must be refused, got {other:?}"),
    }
    // The refusal left the holder's record alone.
    assert_eq!(dir.daemon_holder().unwrap(), Some(me));
    drop(held);
    let again = dir
        .lock_daemon()
        .expect("free again once the holder let it go");
    drop(again);
}

#[test]
fn the_lock_file_names_the_holder_by_pid_and_start_time() {
    let (_t, dir) = state_dir();
    assert_eq!(
        dir.daemon_holder().unwrap(),
        None,
        "no lock file: no holder"
    );
    let _held = dir.lock_daemon().unwrap();
    let text = std::fs::read_to_string(dir.lock_path()).unwrap();
    let fields: Vec<u64> = text
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(fields.len(), 2, "{text:?}");
    assert_eq!(fields[0], u64::from(std::process::id()));
    assert!(fields[1] > 0, "a start time: {text:?}");
    assert_eq!(
        dir.daemon_holder().unwrap(),
        Some(std::process::id() as i32)
    );
    // The directory is private.
    let mode = std::fs::metadata(dir.root()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn a_record_naming_a_process_that_is_not_the_holder_names_no_holder() {
    let (_t, dir) = state_dir();
    dir.ensure().unwrap();
    let me = std::process::id();
    // Our pid with another start time is another process (a reused pid): not the holder.
    std::fs::write(dir.lock_path(), format!("{me} 1\n")).unwrap();
    assert_eq!(dir.daemon_holder().unwrap(), None);
    std::fs::write(dir.lock_path(), "garbage\n").unwrap();
    assert_eq!(dir.daemon_holder().unwrap(), None);
    // Nobody holds the lock itself: a daemon takes it, whatever the stale record said.
    let _held = dir.lock_daemon().unwrap();
    assert_eq!(dir.daemon_holder().unwrap(), Some(me as i32));
}

/// A live holder is refused at once: the short wait is only for a lock whose named daemon is
/// dead (a child it was forking may still hold a copy until its exec).
#[test]
fn a_live_holder_is_refused_at_once() {
    let (_t, dir) = state_dir();
    let _held = dir.lock_daemon().unwrap();
    let t = Instant::now();
    assert!(matches!(dir.lock_daemon(), Err(StateDirError::Held { .. })));
    assert!(
        t.elapsed() < HOLDER_GONE_WAIT / 2,
        "refused after {:?}: a live holder must not be waited for",
        t.elapsed()
    );
}

/// A lock held while the daemon it names is dead is waited for, up to `HOLDER_GONE_WAIT`, then
/// refused: never taken while someone holds it.
#[test]
fn a_lock_held_for_a_dead_daemon_is_waited_for_then_refused() {
    let (_t, dir) = state_dir();
    dir.ensure().unwrap();
    // Held by someone (another open file description) while the file names nobody alive.
    let copy = held_by_another(&dir);
    std::fs::write(dir.lock_path(), "999999999 1\n").unwrap();
    let t = Instant::now();
    match dir.lock_daemon() {
        Err(StateDirError::Held { pid, .. }) => assert_eq!(pid, Some(999_999_999)),
        other => panic!("a held lock must never be taken: {other:?}"),
    }
    assert!(
        t.elapsed() >= HOLDER_GONE_WAIT,
        "refused after {:?}, before the wait for a dead holder's copy was over",
        t.elapsed()
    );
    drop(copy);
    let _taken = dir.lock_daemon().expect("free once the copy is closed");
}

/// `daemon_holder` of a lock held by a process that has not named itself yet (a daemon between
/// taking the lock and writing its pid) looks again, up to `HOLDER_GONE_WAIT`: it names the
/// holder once it has, and says it could not only after the wait.
#[test]
fn a_holder_that_has_not_named_itself_yet_is_waited_for() {
    use std::os::unix::fs::FileExt;
    let (_t, dir) = state_dir();
    dir.ensure().unwrap();
    let copy = held_by_another(&dir);
    let t = Instant::now();
    assert!(
        dir.daemon_holder().is_err(),
        "held by a process that never names itself"
    );
    assert!(
        t.elapsed() >= HOLDER_GONE_WAIT,
        "given up after {:?}",
        t.elapsed()
    );
    let me = std::process::id() as i32;
    let record = format!(
        "{me} {}\n",
        supervisor::sys::process::start_time(me).unwrap()
    );
    std::thread::scope(|s| {
        // The holder names itself a moment after the look began: the look must still be
        // looking then.
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            copy.write_all_at(record.as_bytes(), 0).unwrap();
        });
        assert_eq!(dir.daemon_holder().unwrap(), Some(me));
    });
}

/// A lock file that cannot be read is an error, not "no daemon".
#[test]
fn an_unreadable_lock_file_is_an_error() {
    let (_t, dir) = state_dir();
    std::fs::create_dir_all(dir.lock_path()).unwrap();
    assert!(dir.daemon_holder().is_err());
}
