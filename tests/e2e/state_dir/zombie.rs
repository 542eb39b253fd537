//! A daemon killed by SIGKILL whose parent has not reaped it yet is a zombie: its pid and start
//! time are still in /proc, but it runs nothing and the kernel dropped its lock when it died.
//! `fleet status` must say it is not running, and a new daemon may take the state directory.

use serde_json::Value;

use crate::common::*;

#[test]
fn a_killed_daemon_not_yet_reaped_is_not_running() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    let mut first = f.start_daemon();
    let pid = first.pid();
    // The test process is the daemon's parent, and does not wait for it: a zombie, as under a
    // shell that has not reaped its background job yet.
    first.signal(Signal::KILL);
    f.wait_until(DEADLINE, "the killed daemon to be a zombie", || {
        is_zombie(pid)
    });

    let s = f.status();
    assert_eq!(
        s["daemon"]["running"],
        Value::Bool(false),
        "a zombie daemon is not running: {s}"
    );
    assert!(s["daemon"]["pid"].is_null(), "{s}");
    let out = f.cmd(&["status"]);
    assert_eq!(out.code(), Some(3), "no daemon runs: {out:?}");
    let text = out.stdout;
    assert!(
        text.starts_with("daemon: not running"),
        "`fleet status` while daemon {pid} is a zombie:\n{text}"
    );

    // The lock is free: a new daemon takes over while the old one is still unreaped, and works.
    assert!(is_zombie(pid), "still a zombie");
    let second = f.start_daemon();
    let id = f.enqueue("p");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(
        f.status()["daemon"]["pid"].as_i64(),
        Some(second.pid() as i64)
    );
    assert!(
        is_zombie(pid),
        "the test must not have reaped the first daemon yet"
    );
    drop(second);
    first.kill();
}
