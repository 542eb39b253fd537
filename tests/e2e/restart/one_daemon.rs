//! One daemon per state directory: a second one is refused naming the holder's pid, takes no
//! epoch and touches no run, and the first goes on working.

use std::time::{Duration, Instant};

use crate::common::restart::*;
use crate::common::*;

#[test]
fn failure3_second_daemon_refused() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.held]\ncommand = {}\n[projects.hello]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                0
            ),
            sh("echo hello"),
        )
    });
    let mut d = f.start_daemon();
    let epoch = wait_epoch(&f, d.pid(), 0);
    // A run in flight: the refused daemon must not touch it (no recovery, no takeover).
    let held = f.enqueue("held");
    f.wait_status(held, "running");

    let mut c = f.command();
    c.arg("daemon").env("RUST_LOG", "info");
    let t = Instant::now();
    let out = run_with_deadline(c, Duration::from_secs(30));
    eprintln!("second daemon refused in {:?}", t.elapsed());
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains(&d.pid().to_string()),
        "the refusal should name the holder's pid {}: {out:?}",
        d.pid()
    );
    d.assert_alive();
    let (epoch_after, pid_after) = daemon_epoch_pid(&f);
    assert_eq!(pid_after, d.pid() as i64);
    assert_eq!(
        epoch_after, epoch,
        "the refused daemon must not take an epoch"
    );
    assert_eq!(status_of(&f.run(held)), "running");

    // The first daemon still does its work.
    let hello = f.enqueue("hello");
    let r = f.wait_terminal(hello);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(f.logs(hello), "hello\n");
    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(lines(&f.file("held.start")), [format!("start {held}")]);
    d.assert_alive();
    let (_, pid_after) = daemon_epoch_pid(&f);
    assert_eq!(pid_after, d.pid() as i64);
    assert_check_ok(&f);
}
