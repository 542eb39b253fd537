//! A command that only reads opens the state directory for reading: it works where nothing may
//! be written (a snapshot, a read-only mount), and leaves nothing behind where it could write.
//!
//! The read-only file system is a real one: the state directory bind-mounted read-only onto
//! itself, in a mount namespace of the command's own (`unshare`), which nobody else sees and
//! which ends with the command. As root that needs nothing more; as an ordinary user, a user
//! namespace of its own (`unshare --user --map-root-user`), where the kernel allows one. Where
//! neither works, the test says so loudly and skips.

use std::path::Path;
use std::process::Command;

use crate::common::*;

/// Mounts "$1" read-only onto itself, then runs the rest of the arguments: nothing from the
/// test is read by the shell as code.
const READ_ONLY_MOUNT: &str =
    r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@""#;

/// The `unshare` words that give a command a mount namespace of its own here, or `None` (after
/// a loud message) when none can be had.
fn private_mounts() -> Option<Vec<&'static str>> {
    let words: Vec<&str> = if rustix::process::geteuid().is_root() {
        vec!["unshare", "--mount", "--propagation", "private", "--"]
    } else {
        vec![
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
            "--",
        ]
    };
    let probe = tempfile::tempdir().unwrap();
    let works = Command::new(words[0])
        .args(&words[1..])
        .args(["sh", "-c", READ_ONLY_MOUNT, "sh"])
        .arg(probe.path())
        .arg("true")
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        Some(words)
    } else {
        eprintln!(
            "\n\n!!! SKIPPED: no mount namespace can be had here (`{}`): the read-only state directory tests of tests/state_dir/read_only.rs did not run !!!\n\n",
            words.join(" ")
        );
        None
    }
}

/// `fleet --config <fleet.toml> ARGS…` with the state directory `dir` on a read-only mount.
fn on_read_only(f: &Fleet, unshare: &[&str], dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(unshare[0]);
    c.args(&unshare[1..])
        .args(["sh", "-c", READ_ONLY_MOUNT, "sh"])
        .arg(dir)
        .arg(fleet_bin())
        .arg("--config")
        .arg(&f.config)
        .args(args)
        .env(MARKER_VAR, &f.marker)
        .env_remove("FLEET_CONFIG")
        .env_remove("FAILPOINTS")
        .current_dir(f.path());
    run_with_deadline(c, CMD_DEADLINE)
}

/// The names in the state directory that start with `fleet.db`.
fn db_files(f: &Fleet) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(f.state_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("fleet.db"))
        .collect();
    names.sort();
    names
}

/// One run that printed `hello`, its daemon stopped cleanly (SIGTERM): the database is whole in
/// fleet.db, with no write-ahead log beside it.
fn stopped_install() -> Fleet {
    let f = Fleet::new("[projects.p]\ncommand = [\"sh\", \"-c\", \"echo hello\"]\n");
    let id = f.enqueue("p");
    {
        let mut d = f.start_daemon();
        assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
        d.signal(Signal::TERM);
        f.wait_until(DEADLINE, "the daemon to stop", || d.try_exit().is_some());
    }
    assert_eq!(
        db_files(&f),
        ["fleet.db"],
        "a clean stop leaves fleet.db alone"
    );
    f
}

/// After a clean stop, on a read-only file system: every command that only reads prints what is
/// there, as it would on a writable one.
#[test]
fn a_state_directory_on_a_read_only_file_system_is_read() {
    let f = stopped_install();
    let Some(unshare) = private_mounts() else {
        return;
    };
    let dir = f.state_dir();
    let ok = |args: &[&str]| {
        let out = on_read_only(&f, &unshare, &dir, args);
        assert_eq!(
            out.code(),
            Some(0),
            "fleet {args:?} on a read-only state directory: {out:?}"
        );
        out.stdout
    };
    let runs: serde_json::Value = serde_json::from_str(&ok(&["runs", "--json"])).unwrap();
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
    assert!(ok(&["runs"]).contains("succeeded"));
    assert_eq!(ok(&["logs", "1"]), "hello\n");
    assert!(ok(&["check"]).starts_with("ok: 1 runs"));
    let out = on_read_only(&f, &unshare, &dir, &["status", "--json"]);
    assert_eq!(
        out.code(),
        Some(3),
        "no daemon runs, and that is all: {out:?}"
    );
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(status["daemon"]["state"], "stopped", "{status}");
    // A command that writes is refused there, naming the file.
    let out = on_read_only(&f, &unshare, &dir, &["cancel", "1"]);
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert!(out.stderr.contains("fleet.db"), "{out:?}");
    assert_eq!(db_files(&f), ["fleet.db"]);
}

/// Where it could write, a command that only reads leaves nothing behind: the write-ahead log
/// and shared memory SQLite makes for a reader are gone once it is done — unless a daemon has
/// the database open, whose files they are.
#[test]
fn a_read_leaves_nothing_behind() {
    let f = stopped_install();
    let state = f.state_dir();
    let before = std::fs::read(state.join("fleet.db")).unwrap();
    for args in [
        &["runs"][..],
        &["runs", "--json"],
        &["status"],
        &["check"],
        &["logs", "1"],
        &["wait", "1"],
        &["hosts"],
        &["projects"],
        &["prune", "--dry-run"],
    ] {
        let out = f.cmd(args);
        assert!(matches!(out.code(), Some(0 | 3)), "fleet {args:?}: {out:?}");
        assert_eq!(db_files(&f), ["fleet.db"], "after fleet {args:?}");
    }
    assert!(
        std::fs::read(state.join("fleet.db")).unwrap() == before,
        "a read changed fleet.db"
    );

    // A daemon's files stay while it runs, whatever is read meanwhile.
    let _d = f.start_daemon();
    let id = f.enqueue("p");
    f.wait_terminal(id);
    for _ in 0..5 {
        f.cmd_ok(&["runs"]);
        assert_eq!(
            db_files(&f),
            ["fleet.db", "fleet.db-shm", "fleet.db-wal"],
            "the running daemon's write-ahead log and shared memory"
        );
    }
    let id = f.enqueue("p");
    assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
}
