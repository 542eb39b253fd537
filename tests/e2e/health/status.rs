//! `fleet status` exits 0 while a daemon holds the state directory and its loop evaluates, 1
//! while one holds it but is stuck (its loop does not turn, or the process does not answer at
//! all: SIGSTOP), 3 while none holds it (never started, or killed); `--json` says the same in
//! `daemon.state` and `daemon.reason`.

use serde_json::Value;

use crate::common::*;

const CONFIG: &str = "tick = \"100ms\"\n[projects.p]\ncommand = [\"true\"]\n";

/// `fleet status --json`: (exit status, report).
fn status(f: &Fleet) -> (Option<i32>, Value) {
    let out = f.cmd(&["status", "--json"]);
    let v = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("`fleet status --json` is not JSON ({e}): {out:?}"));
    (out.code(), v)
}

/// Waits until `fleet status` exits `code`, and returns its report.
fn wait_code(f: &Fleet, code: i32, what: &str) -> Value {
    let mut last = (None, Value::Null);
    f.wait_until(DEADLINE, what, || {
        last = status(f);
        last.0 == Some(code)
    });
    last.1
}

#[test]
fn no_daemon_exits_3_a_running_one_0_a_killed_one_3() {
    let f = Fleet::new(CONFIG);
    let (code, s) = status(&f);
    assert_eq!(code, Some(3), "{s}");
    assert_eq!(s["daemon"]["state"], "stopped", "{s}");
    assert!(s["daemon"]["reason"].is_null(), "{s}");
    let out = f.cmd(&["status"]);
    assert_eq!(out.code(), Some(3), "{out:?}");
    assert!(out.stdout.starts_with("daemon: not running"), "{out:?}");
    assert!(out.stderr.contains("no daemon holds"), "{out:?}");

    let mut d = f.start_daemon();
    let s = wait_code(&f, 0, "status 0 from the running daemon");
    assert_eq!(s["daemon"]["state"], "running", "{s}");
    assert_eq!(s["daemon"]["running"], true, "the fields kept: {s}");
    assert!(s["daemon"]["reason"].is_null(), "{s}");
    let out = f.cmd(&["status"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");

    d.kill();
    let (code, s) = status(&f);
    assert_eq!(code, Some(3), "a killed daemon holds nothing: {s}");
    assert_eq!(s["daemon"]["state"], "stopped", "{s}");
}

/// After `state_dir` is edited under a running daemon (which keeps its own until it restarts),
/// `fleet status` reads the new folder, where no daemon has run: it says so, rather than a
/// bare "not running" that reads as "the daemon is down" and invites a second one.
#[test]
fn status_of_a_state_directory_no_daemon_has_run_with_says_so() {
    let f = Fleet::new(CONFIG);
    let mut d = f.start_daemon();
    wait_code(&f, 0, "status 0 from the running daemon");
    f.write_config(&format!("state_dir = \"elsewhere\"\n{CONFIG}"));
    let (code, s) = status(&f);
    assert_eq!(code, Some(3), "{s}");
    assert_eq!(s["daemon"]["ever_ran_here"], false, "{s}");
    let said = "daemon: not running here: no daemon has run with this state directory yet";
    let out = f.cmd(&["status"]);
    assert!(out.stdout.starts_with(said), "{out:?}");
    // A command that makes the new folder and its database (a script's `fleet enqueue`) leaves
    // it so: still no daemon has run there, and the run it queued waits for one.
    f.enqueue("p");
    let (_, s) = status(&f);
    assert_eq!(s["daemon"]["ever_ran_here"], false, "{s}");
    assert!(f.cmd(&["status"]).stdout.starts_with(said));
    // Where a daemon did run, a stopped one is just that.
    f.write_config(CONFIG);
    d.kill();
    let (code, s) = status(&f);
    assert_eq!(code, Some(3), "{s}");
    assert_eq!(s["daemon"]["ever_ran_here"], true, "{s}");
    assert!(f
        .cmd(&["status"])
        .stdout
        .starts_with("daemon: not running\n"));
}

/// A daemon stopped with SIGSTOP holds its lock and its socket accepts the connection, but it
/// never answers: stuck (1), within the client's timeout; running again once continued.
#[test]
fn a_stopped_daemon_is_stuck() {
    let f = Fleet::new(CONFIG);
    let d = f.start_daemon();
    wait_code(&f, 0, "status 0 from the running daemon");
    d.signal(Signal::STOP);
    let (code, s) = status(&f);
    assert_eq!(code, Some(1), "{s}");
    assert_eq!(s["daemon"]["state"], "stuck", "{s}");
    assert_eq!(s["daemon"]["running"], true, "it still holds the lock: {s}");
    let reason = s["daemon"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("did not answer"), "{s}");
    let out = f.cmd(&["status"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(out.stdout.contains("daemon is STUCK"), "{out:?}");
    assert!(
        out.stdout.starts_with("daemon: stuck, pid "),
        "the first line must not say running: {out:?}"
    );
    assert!(out.stderr.contains("stuck"), "{out:?}");
    d.signal(Signal::CONT);
    wait_code(&f, 0, "status 0 once the daemon is continued");
}

/// A daemon whose loop does not turn (held inside its EVAL by a failpoint) answers, from its
/// heartbeat: stuck, and why.
#[test]
fn a_daemon_whose_loop_does_not_turn_is_stuck() {
    let f = Fleet::new(CONFIG);
    let _d = f.start_daemon_env(&[("FAILPOINTS", "daemon-before-finalize=sleep(60000)")]);
    let s = wait_code(&f, 1, "status 1 from the daemon held in its EVAL");
    assert_eq!(s["daemon"]["state"], "stuck", "{s}");
    let reason = s["daemon"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("EVAL"), "the heartbeat's words: {s}");
}
