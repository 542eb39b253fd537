//! The daemon lock as the authority on who holds a state directory, the identity of what a
//! daemon opened, and missing versus unusable state.

use super::*;

fn dir() -> (tempfile::TempDir, StateDir) {
    let tmp = tempfile::tempdir().unwrap();
    let state = StateDir::new(tmp.path().join(".fleet"));
    (tmp, state)
}

/// The lock file names a process that is alive — this one — but nobody holds the lock: no
/// daemon holds the directory. (A daemon that died leaves exactly this, zombie or not.)
#[test]
fn a_lock_file_naming_a_live_process_is_not_a_holder_without_the_lock() {
    let (_tmp, state) = dir();
    state.ensure().unwrap();
    let me = std::process::id() as i32;
    let start = process::start_time(me).unwrap();
    std::fs::write(state.lock_path(), format!("{me} {start}\n")).unwrap();
    assert_eq!(state.daemon_holder().unwrap(), None);
}

#[test]
fn the_lock_holder_is_named_and_released_on_drop() {
    let (_tmp, state) = dir();
    assert_eq!(state.daemon_holder().unwrap(), None, "no lock file yet");
    let lock = state.lock_daemon().unwrap();
    let me = std::process::id() as i32;
    assert_eq!(state.daemon_holder().unwrap(), Some(me));
    // The probe took nothing: the lock is still exclusively ours, and a second taker refused.
    assert!(matches!(
        state.lock_daemon(),
        Err(StateDirError::Held { pid: Some(p), .. }) if p == me
    ));
    drop(lock);
    assert_eq!(state.daemon_holder().unwrap(), None);
    let _again = state.lock_daemon().unwrap();
}

#[test]
fn what_was_opened_is_checked_by_device_and_inode() {
    let (tmp, state) = dir();
    let lock = state.lock_daemon().unwrap();
    let _store = state.open_store().unwrap();
    let opened = state.opened(&lock).unwrap();
    state.check_opened(&opened).unwrap();

    // fleet.db renamed over by a copy: same path, another file.
    let copy = state.root().join("copy.db");
    std::fs::copy(state.db_path(), &copy).unwrap();
    std::fs::rename(&copy, state.db_path()).unwrap();
    let e = state.check_opened(&opened).unwrap_err();
    assert!(e.to_string().contains("fleet.db was replaced"), "{e}");

    // The whole directory moved away, another in its place.
    let opened = state.opened(&lock).unwrap();
    std::fs::rename(state.root(), tmp.path().join("old")).unwrap();
    std::fs::create_dir(state.root()).unwrap();
    let e = state.check_opened(&opened).unwrap_err();
    assert!(
        e.to_string().contains("the state directory was replaced"),
        "{e}"
    );

    std::fs::remove_dir_all(state.root()).unwrap();
    let e = state.check_opened(&opened).unwrap_err();
    assert!(
        e.to_string().contains("the state directory was removed"),
        "{e}"
    );
    assert!(
        e.to_string().contains(&state.root().display().to_string()),
        "{e}"
    );
}

#[test]
fn a_removed_lock_file_is_seen() {
    let (_tmp, state) = dir();
    let lock = state.lock_daemon().unwrap();
    let _store = state.open_store().unwrap();
    let opened = state.opened(&lock).unwrap();
    std::fs::remove_file(state.lock_path()).unwrap();
    let e = state.check_opened(&opened).unwrap_err();
    assert!(e.to_string().contains("daemon.lock was removed"), "{e}");
}

/// Nothing there is "no database yet"; a state directory that is not a directory is not.
#[test]
fn missing_is_none_and_unusable_is_an_error() {
    let (_tmp, state) = dir();
    assert!(state.open_existing_store().unwrap().is_none());
    std::fs::write(state.root(), "not a directory").unwrap();
    let Err(e) = state.open_existing_store() else {
        panic!("a state directory that is a file is not an empty one");
    };
    assert!(
        e.to_string().contains(&state.root().display().to_string()),
        "{e}"
    );
    assert!(!e.is_permission_denied());
}

/// The lock names its holder by pid and start time first; the host name and the shared
/// database's target after them may be long and not ASCII, and a read of the start cut inside
/// a character still finds the holder. Both are read back whole.
#[test]
fn a_long_database_target_after_the_holder_keeps_it_readable() {
    let (_tmp, state) = dir();
    let mut lock = state.lock_daemon().unwrap();
    let target = "postgresql fleet on /tmp/é-é-é-é-é-é-é-é-é-é-é-é-é-é-é-é:5432 as fleet";
    lock.record_host("h", Some(target));
    assert_eq!(state.recorded_host().as_deref(), Some("h"));
    assert_eq!(state.recorded_database().as_deref(), Some(target));
    assert_eq!(
        state.daemon_holder().unwrap(),
        Some(std::process::id() as i32)
    );
    // The same, padded so that the first 64 bytes, which the holder is read from, end inside
    // a character (the file rewritten in place: the lock stays).
    let text = std::fs::read_to_string(state.lock_path()).unwrap();
    let head: Vec<&str> = text.split_whitespace().take(3).collect();
    let mut line = format!("{} ", head.join(" "));
    while line.len() < 63 {
        line.push('x');
    }
    line.push_str("é rest\n");
    assert!(std::str::from_utf8(&line.as_bytes()[..64]).is_err());
    std::fs::write(state.lock_path(), &line).unwrap();
    assert_eq!(
        state.daemon_holder().unwrap(),
        Some(std::process::id() as i32)
    );
}

/// A daemon that lost the race for the lock names the winner, never "pid unknown", however the
/// winner rewrites the lock file meanwhile: each look reads the file once and answers from that
/// read, and a look that finds no pid yet looks again. Here the holder (this process, through
/// another open file description) rewrites the file without pause, blanking it now and then as
/// a careless writer would (a look that reads it twice finds it blank the second time within a
/// few hundred looks). Blanked in place, not truncated: a truncation can wait on the disk, and
/// a file left empty for seconds on a busy machine would be a holder that names nobody.
#[test]
fn the_loser_of_a_start_race_names_the_winner() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_tmp, state) = dir();
    state.ensure().unwrap();
    let holder = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(state.lock_path())
        .unwrap();
    assert!(files::try_lock_exclusive(&holder).unwrap());
    let me = std::process::id() as i32;
    let record = format!("{me} {}\n", process::start_time(me).unwrap());
    let blank = " ".repeat(record.len());
    holder.write_all_at(record.as_bytes(), 0).unwrap();
    let stop = AtomicBool::new(false);
    let answers: Vec<Result<DaemonLock, StateDirError>> = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                holder.write_all_at(blank.as_bytes(), 0).unwrap();
                // The record stays whole most of the time; the blank moment above comes back
                // on every round.
                for _ in 0..50 {
                    holder.write_all_at(record.as_bytes(), 0).unwrap();
                }
            }
        });
        let answers = (0..500).map(|_| state.lock_daemon()).collect();
        // Stopped before any answer is judged: a failed assertion must not leave the writer
        // spinning, and the scope waiting for it.
        stop.store(true, Ordering::Relaxed);
        answers
    });
    for answer in answers {
        match answer {
            Err(StateDirError::Held { pid, .. }) => assert_eq!(pid, Some(me)),
            other => panic!("{other:?}"),
        }
    }
}

/// The lock file is rewritten in place, never emptied: a reader finds the holder in it at
/// every instant, the record growing by the host name.
#[test]
fn the_lock_record_is_rewritten_without_an_empty_moment() {
    let (_tmp, state) = dir();
    std::fs::create_dir_all(state.root()).unwrap();
    std::fs::write(state.lock_path(), "1 2 an-older-daemons-long-host-name\n").unwrap();
    let mut lock = state.lock_daemon().unwrap();
    let me = std::process::id() as i32;
    let start = process::start_time(me).unwrap();
    assert_eq!(
        std::fs::read_to_string(state.lock_path()).unwrap(),
        format!("{me} {start}\n"),
        "the older record is cut to the new one's length"
    );
    lock.record_host("h", None);
    assert_eq!(
        std::fs::read_to_string(state.lock_path()).unwrap(),
        format!("{me} {start} h\n")
    );
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A folder group or others may write into is refused by what writes, and named with its mode;
/// nothing changes its mode, whatever it is.
#[test]
fn a_folder_others_may_write_into_is_refused_and_left_as_it_is() {
    let (_tmp, state) = dir();
    state.open_store().unwrap();
    assert_eq!(mode_of(state.root()), 0o700, "made private");
    assert_eq!(state.exposed(), None);
    for (mode, who) in [
        (0o777, "its group and other users"),
        (0o1777, "its group and other users"),
        (0o770, "its group"),
        (0o703, "other users"),
    ] {
        chmod(state.root(), mode);
        let exposed = state.exposed().expect("exposed");
        assert_eq!(exposed.path, state.root());
        assert_eq!(exposed.mode, mode);
        assert!(
            exposed.to_string().contains(&format!(": {who} may write")),
            "{exposed}"
        );
        for refused in [
            state.ensure().err(),
            state.open_store().err(),
            state.open_existing_store_to_write().err(),
            state.lock_daemon().err(),
        ] {
            match refused {
                Some(StateDirError::Exposed(e)) => assert_eq!(e, exposed),
                other => panic!("{mode:o}: {other:?}"),
            }
        }
        // Reading is the caller's to warn about: it opens.
        assert!(state.open_existing_store().unwrap().is_some());
        assert_eq!(mode_of(state.root()), mode, "left as it is");
    }
    // Readable by others, not writable: used as it is.
    chmod(state.root(), 0o755);
    state.ensure().unwrap();
    assert_eq!(mode_of(state.root()), 0o755);
    // runs/ too.
    chmod(state.root(), 0o700);
    let runs = state.root().join("runs");
    std::fs::create_dir(&runs).unwrap();
    chmod(&runs, 0o775);
    assert_eq!(
        state.exposed(),
        Some(Exposed {
            path: runs.clone(),
            mode: 0o775
        })
    );
    assert!(matches!(state.ensure(), Err(StateDirError::Exposed(_))));
    assert_eq!(mode_of(&runs), 0o775);
    // A missing runs/, or a file where a folder would be, exposes nothing.
    std::fs::remove_dir(&runs).unwrap();
    assert_eq!(state.exposed(), None);
    std::fs::write(&runs, "").unwrap();
    chmod(&runs, 0o666);
    assert_eq!(state.exposed(), None);
}

/// `ensure` creates nothing in a folder it may not write into, to find out.
#[test]
fn ensure_finds_a_folder_it_may_not_write_without_creating_anything() {
    let (_tmp, state) = dir();
    std::fs::create_dir(state.root()).unwrap();
    // Read-only for everyone (root included: access(2) answers for the file system too, but a
    // root test still gets through a mode; only the names are checked then).
    chmod(state.root(), 0o500);
    let r = state.ensure();
    chmod(state.root(), 0o700);
    if !rustix::process::geteuid().is_root() {
        assert!(matches!(r, Err(StateDirError::Unusable { .. })), "{r:?}");
    }
    let names: Vec<_> = std::fs::read_dir(state.root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        names.iter().all(|n| n == "fleet.db"),
        "nothing but the database: {names:?}"
    );
}

/// fleet run as root in a state directory that is another user's (the package's
/// `/var/lib/fleet`, the `fleet` user's) gives every file it creates there to that user: the
/// database (and SQLite its -wal and -shm files), the daemon lock, the pruners' lock, the
/// record of boots. Files that were there already keep their owner. Runs only as root.
#[test]
fn files_made_as_root_in_another_users_state_directory_are_that_users() {
    if !rustix::process::geteuid().is_root() {
        // Only root may change an owner (CI runs the tests as root).
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let (_tmp, state) = dir();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(state.root())
        .unwrap();
    let (uid, gid) = (65534, 65533);
    std::os::unix::fs::chown(state.root(), Some(uid), Some(gid)).unwrap();
    let owner = |name: &str| {
        let meta = std::fs::metadata(state.root().join(name)).unwrap();
        (meta.uid(), meta.gid(), meta.mode() & 0o777)
    };

    // SQLite's own files, seen while it has them open (it removes its log at the last close).
    let store = state.open_store().unwrap();
    store.pause(store::HoldKind::Project, "p", None, 0).unwrap();
    for name in ["fleet.db", "fleet.db-wal", "fleet.db-shm"] {
        assert_eq!(owner(name), (uid, gid, 0o600), "{name}");
    }
    drop(store);

    let lock = state.lock_daemon().unwrap();
    assert_eq!(owner("daemon.lock"), (uid, gid, 0o600));
    drop(lock);

    let store = state.open_store().unwrap();
    let policy = store::PrunePolicy {
        default: store::Keep {
            newest: Some(1),
            finished_after: None,
        },
        projects: Default::default(),
        ended_before: 0,
        host: None,
    };
    crate::prune::prune_batch(state.root(), &store, &policy, false).unwrap();
    assert_eq!(owner("prune.lock"), (uid, gid, 0o600));

    crate::boot::Boots::take(state.root(), 1).unwrap();
    assert_eq!(owner(crate::boot::BOOT_FILE).0, uid);

    // A file that was there, root's, stays root's.
    std::fs::remove_file(state.root().join("prune.lock")).unwrap();
    std::fs::write(state.root().join("prune.lock"), "").unwrap();
    crate::prune::prune_batch(state.root(), &store, &policy, false).unwrap();
    assert_eq!(owner("prune.lock").0, 0);
}

/// "Permission denied" on a file of another user's says whose it is and how to give it back.
#[test]
fn permission_denied_on_another_users_file_says_whose_it_is() {
    let (_tmp, state) = dir();
    state.ensure().unwrap();
    let denied = io::Error::from(io::ErrorKind::PermissionDenied);
    // This user's own file: nothing to add.
    assert_eq!(files::whose(&state.db_path(), &denied), "");
    if !rustix::process::geteuid().is_root() {
        return;
    }
    std::os::unix::fs::chown(state.db_path(), Some(65534), None).unwrap();
    let said = StateDirError::Inaccessible {
        path: state.db_path(),
        source: denied,
    }
    .to_string();
    assert!(said.contains("it belongs to "), "{said}");
    assert!(
        said.ends_with(&format!(
            "chown root:{} {})",
            group_of_root(),
            state.db_path().display()
        )),
        "{said}"
    );
    // Another error: nothing added.
    assert_eq!(
        files::whose(&state.db_path(), &io::Error::from(io::ErrorKind::NotFound)),
        ""
    );
}

fn group_of_root() -> String {
    nix::unistd::Group::from_gid(rustix::process::getegid().as_raw().into())
        .unwrap()
        .map(|g| g.name)
        .unwrap_or_else(|| "0".into())
}
