//! Every way an edit reaches the daemon: editors that save by rename and by truncate-and-write
//! (seen by the watcher), the target of a symlinked fleet.toml, SIGHUP, `fleet reload`, and an
//! edit saved while the daemon starts. A half-written file is never applied, even when it
//! happens to parse.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::gates::*;
use super::reload::*;
use crate::common::*;

fn config(global: usize, word: &str) -> String {
    format!(
        "max_concurrency = {global}\n[projects.p]\ncommand = {}\n",
        sh(&format!("echo {word} $FLEET_RUN_ID"))
    )
}

/// Saved by rename (vim, `sed -i`): the watcher notices it without `fleet reload`.
#[test]
fn a_save_by_rename_is_noticed_without_reload() {
    let f = Fleet::new(&config(2, "one"));
    let mut d = start(&f);
    wait_applied(&f, 2, "the daemon's first config");
    let tmp = f.file(".fleet.toml.swp");
    std::fs::write(&tmp, config(3, "two")).unwrap();
    std::fs::rename(&tmp, &f.config).unwrap();
    wait_applied(&f, 3, "the renamed-over file to be applied");
    let id = f.enqueue("p");
    assert_all_succeed(&f, &[id]);
    assert_eq!(f.logs(id), format!("two {id}\n"));
    // And again, on the new inode.
    std::fs::write(&tmp, config(4, "three")).unwrap();
    std::fs::rename(&tmp, &f.config).unwrap();
    wait_applied(&f, 4, "a second rename to be applied");
    d.assert_alive();
}

/// Saved by truncate-and-write, in two chunks: the half-written file is refused (a failed
/// parse; the last good config stays in force), and the rest of the write is applied — all
/// without `fleet reload`.
#[test]
fn a_save_by_truncate_and_write_is_noticed_and_a_half_written_file_is_a_failed_parse() {
    let f = Fleet::new(&config(3, "one"));
    let mut d = start(&f);
    wait_applied(&f, 3, "the daemon's first config");
    let text = config(5, "two");
    // Cut inside the command's string: not valid TOML.
    let cut = text.find("echo two").unwrap() + 3;
    let (first, rest) = text.split_at(cut);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&f.config)
        .unwrap();
    file.write_all(first.as_bytes()).unwrap();
    file.flush().unwrap();
    let s = wait_status(&f, "the half-written file to be refused", |s| {
        reload_error(s).is_some()
    });
    let err = reload_error(&s).unwrap();
    assert!(
        err.starts_with(&format!("{}:3:", f.config.display())) && err.contains("invalid TOML"),
        "the half-written file is a failed parse naming line 3: {err}"
    );
    // The refused text (global cap 5) is not in force. The last good config is the first one
    // (cap 3) — or the empty file the watcher may have caught between the truncation and the
    // first write, which is a valid config (every default: cap 4) and gets applied. That second
    // case is the bug `a_half_written_save_that_happens_to_parse_cancels_nothing` pins down;
    // it is tolerated here so that this test shows the rest of the rule.
    assert!(
        matches!(global_cap(&s), Some(3 | 4)),
        "the refused half-written file changed the caps: {s}"
    );
    d.assert_alive();
    file.write_all(rest.as_bytes()).unwrap();
    file.flush().unwrap();
    drop(file);
    wait_applied(&f, 5, "the completed file to be applied");
    let id = f.enqueue("p");
    assert_all_succeed(&f, &[id]);
    assert_eq!(f.logs(id), format!("two {id}\n"));
    d.assert_alive();
}

/// A fleet whose fleet.toml is a symlink to `real/fleet.toml`: the watcher (on fleet.toml's
/// folder) does not see edits of the target, so only SIGHUP or `fleet reload` can bring them in.
fn symlinked_fleet(text: &str) -> (Fleet, PathBuf) {
    let f = Fleet::new(text);
    let real = f.file("real");
    std::fs::create_dir(&real).unwrap();
    let target = real.join("fleet.toml");
    std::fs::write(&target, text).unwrap();
    std::fs::remove_file(&f.config).unwrap();
    std::os::unix::fs::symlink(&target, &f.config).unwrap();
    (f, target)
}

/// Edits the symlink's target by rename inside its own folder.
fn edit_target(target: &Path, text: &str) {
    let tmp = target.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, target).unwrap();
}

/// An edit of a symlinked fleet.toml's target is noticed by itself, like an edit of the file.
#[test]
fn an_edit_of_a_symlinked_configs_target_is_noticed() {
    let (f, target) = symlinked_fleet(&config(2, "one"));
    let _d = start(&f);
    edit_target(&target, &config(5, "one"));
    f.wait_until(DEADLINE, "the target's edit to be applied", || {
        f.status()["global"]["max_concurrency"] == 5
    });
}

#[test]
fn sighup_rereads_the_file() {
    let (f, target) = symlinked_fleet(&config(2, "one"));
    // The watcher is off, so only the signal or the command can bring the edit in.
    let mut d = f.start_daemon_env(&[("FLEET_WATCH", "0")]);
    reload_round_trip(&f);
    wait_applied(&f, 2, "the daemon's first config");
    edit_target(&target, &config(6, "two"));
    d.signal(Signal::HUP);
    wait_applied(&f, 6, "SIGHUP to bring in the edit");
    d.assert_alive();
    // A bad edit through SIGHUP is refused like any other.
    edit_target(&target, "max_concurrency = 0\n");
    d.signal(Signal::HUP);
    let s = wait_status(&f, "SIGHUP to refuse the bad edit", |s| {
        reload_error(s).is_some()
    });
    assert!(
        reload_error(&s)
            .unwrap()
            .contains(&format!("{}:1: max_concurrency", f.config.display())),
        "{s}"
    );
    assert_eq!(global_cap(&s), Some(6));
    d.assert_alive();
}

#[test]
fn fleet_reload_rereads_the_file() {
    let (f, target) = symlinked_fleet(&config(2, "one"));
    // The watcher is off, so only the signal or the command can bring the edit in.
    let mut d = f.start_daemon_env(&[("FLEET_WATCH", "0")]);
    reload_round_trip(&f);
    wait_applied(&f, 2, "the daemon's first config");
    edit_target(&target, &config(7, "two"));
    assert_eq!(f.cmd_ok(&["reload"]).trim(), "reload requested");
    wait_applied(&f, 7, "`fleet reload` to bring in the edit");
    let id = f.enqueue("p");
    assert_all_succeed(&f, &[id]);
    assert_eq!(f.logs(id), format!("two {id}\n"));
    d.assert_alive();
}

/// An editor that truncates and writes can be caught between the two by the watcher. When the
/// half-written file happens to be a *valid* config — empty, or cut at a line boundary — it must
/// not be applied: here the cut drops the project `late` for a moment, and applying that moment
/// cancels `late`'s queued run for good ("project removed"), although the saved file keeps the
/// project. The pause between the two writes stands for a slow editor (it is not
/// synchronisation: the test waits for the outcome by polling).
#[test]
fn a_half_written_save_that_happens_to_parse_cancels_nothing() {
    let mk = |dir: &Path, cap: usize| {
        let p = Paths::of(dir);
        format!(
            "max_concurrency = {cap}\n[projects.blocker]\ncommand = {}\n[projects.late]\ncommand = {}\n",
            gated(&p, "blocker"),
            quick(&p, "late")
        )
    };
    let f = Fleet::with(|dir| mk(dir, 1));
    let p = Paths::of(f.path());
    let mut d = start(&f);
    let blocker = f.enqueue("blocker");
    wait_started(&f, &p, blocker);
    let late = f.enqueue("late"); // queued behind the cap of 1

    let text = mk(f.path(), 2);
    let cut = text.find("[projects.late]").unwrap();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&f.config)
        .unwrap();
    file.write_all(&text.as_bytes()[..cut]).unwrap();
    file.flush().unwrap();
    std::thread::sleep(Duration::from_millis(150)); // the editor is still writing
    file.write_all(&text.as_bytes()[cut..]).unwrap();
    file.flush().unwrap();
    drop(file);
    wait_applied(&f, 2, "the saved file to be applied");
    let r = f.wait_terminal(late);
    assert_eq!(
        status_of(&r),
        "succeeded",
        "the queued run of `late`, a project the saved file keeps, was ended by a half-written \
         file: {r}\n{}",
        f.diagnostics()
    );
    release_all(&p);
    assert_all_succeed(&f, &[blocker]);
    d.assert_alive();
}

/// An edit saved after the daemon read fleet.toml but before its watcher was set up must not be
/// lost. The window is made wide by holding the database's write lock while the daemon starts:
/// it has read the file and taken the state directory, and waits to take over the database
/// (it logs "the database is busy"). The file is edited then, the lock let go, and the edit must
/// come into force without any further change of the file, `fleet reload` or SIGHUP.
#[test]
fn an_edit_saved_while_the_daemon_starts_is_applied() {
    let f = Fleet::new("max_concurrency = 2\n[projects.p]\ncommand = [\"true\"]\n");
    let id = f.enqueue("p"); // creates and migrates the database
    let db = rusqlite::Connection::open(f.state_dir().join("fleet.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Not `start_daemon`: it waits for the daemon to be up, which the held lock prevents.
    let mut daemon = f.spawn_daemon(&[]);
    f.wait_until(DEADLINE, "the daemon to wait for the database", || {
        assert!(daemon.try_exit().is_none(), "the daemon exited");
        daemon.stderr().contains("the database is busy")
    });
    f.replace_config("max_concurrency = 3\n[projects.p]\ncommand = [\"true\"]\n");
    db.execute_batch("ROLLBACK").unwrap();
    drop(db);
    assert_all_succeed(&f, &[id]);
    let mut s = Value::Null;
    let start = Instant::now();
    while global_cap(&s) != Some(3) && start.elapsed() < Duration::from_secs(30) {
        s = status_any(&f);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        global_cap(&s),
        Some(3),
        "the edit saved while the daemon started was never applied: {s}\n{}",
        daemon.stderr()
    );
    assert!(daemon.try_exit().is_none(), "the daemon exited");
}
