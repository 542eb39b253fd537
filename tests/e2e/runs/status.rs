//! `fleet status --json` shows the daemon and occupancy; a second daemon on the same state
//! directory is refused naming the first.

use crate::common::*;

#[test]
fn status_json_shows_the_daemon_and_occupancy() {
    let f = Fleet::new(
        "max_concurrency = 4\n[namespaces.ops]\nmax_concurrency = 2\n\
         [projects.sleeper]\nnamespace = \"ops\"\ncommand = [\"sleep\", \"300\"]\n",
    );
    let mut d = f.start_daemon();
    let id = f.enqueue("sleeper");
    f.wait_status(id, "running");
    let s = f.status();
    let daemon = &s["daemon"];
    assert_eq!(daemon["running"], true, "{s}");
    assert_eq!(daemon["pid"].as_i64(), Some(d.pid() as i64), "{s}");
    assert!(daemon["epoch"].as_i64().is_some_and(|e| e >= 1), "{s}");
    assert_eq!(s["global"]["active"], 1, "{s}");
    assert_eq!(s["global"]["max_concurrency"], 4, "{s}");
    assert_eq!(s["namespaces"]["ops"]["active"], 1, "{s}");
    assert_eq!(s["namespaces"]["ops"]["max_concurrency"], 2, "{s}");

    d.kill();
    // The kernel drops the daemon's lock with the process: no polling needed.
    let s = f.status();
    assert_eq!(s["daemon"]["running"], false, "{s}");
    assert!(s["daemon"]["pid"].is_null(), "{s}");
}

#[test]
fn second_daemon_is_refused_naming_the_first() {
    let f = Fleet::new("[projects.hello]\ncommand = [\"sh\", \"-c\", \"echo hello\"]\n");
    let mut d = f.start_daemon();
    let out = f.cmd(&["daemon"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains(&d.pid().to_string()),
        "the refusal should name the holder's pid {}: {out:?}",
        d.pid()
    );
    d.assert_alive();
    let s = f.status();
    assert_eq!(s["daemon"]["pid"].as_i64(), Some(d.pid() as i64), "{s}");
    let id = f.enqueue("hello");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(f.logs(id), "hello\n");
    d.assert_alive();
}

/// SIGTERM while the daemon is still starting (here held in its recovery by a failpoint, after
/// the takeover, with its sockets bound) is a clean stop once the start is done: exit 0, both
/// sockets removed, the run queued meanwhile still queued. Without a handler installed from the
/// start, the kernel would end the daemon on the spot.
#[test]
fn a_stop_asked_for_while_the_daemon_starts_is_a_clean_stop() {
    let f = Fleet::new("http_listen = \"unix:http.sock\"\n[projects.p]\ncommand = [\"true\"]\n");
    let id = f.enqueue("p");
    let mut d = f.spawn_daemon(&[("FAILPOINTS", "recovery-before-apply=sleep(1500)")]);
    f.wait_until(DEADLINE, "the takeover", || {
        d.stderr().contains("took over the state directory")
    });
    d.signal(Signal::TERM);
    f.wait_until(DEADLINE, "the daemon to stop", || d.try_exit().is_some());
    assert_eq!(d.exited().unwrap().code(), Some(0), "{}", d.stderr());
    assert!(
        !f.file("http.sock").exists(),
        "the HTTP socket is left behind"
    );
    assert!(
        !f.state_dir().join("daemon.sock").exists(),
        "the control socket is left behind"
    );
    assert_eq!(status_of(&f.run(id)), "queued");
}
