//! One daemon per host name. Two state directories with the same fleet.toml (the same host
//! name, on one database) are two machines under one name: while the first daemon is alive, the
//! second is refused, naming the host, the machine and pid it runs on and what to do, and the
//! first goes on untouched. Once the first stopped cleanly, the second may start; the run the
//! first left in flight is settled from its files only by a daemon that has them. Once the
//! first is silent (frozen past the liveness bound) the second may take over too, and the first,
//! fenced by the epoch, stops with a message saying so instead of writing over the newer
//! daemon's work.

use std::path::PathBuf;

use super::{database_url, pg_fleet};
use crate::common::restart::*;
use crate::common::*;

/// The machine's node name, as fleet records where a daemon runs.
fn machine() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// A folder beside the fleets, and the files of project `long`'s gated command in it: written
/// when it starts, waited for before it ends, written when it ends.
fn long_gate() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let shared = tempfile::tempdir().unwrap();
    let [start, go, end] = ["long.start", "long.go", "long.end"].map(|f| shared.path().join(f));
    (shared, start, go, end)
}

#[test]
fn a_live_host_name_is_refused_to_another_state_directory_and_freed_by_a_clean_stop() {
    let Some(url) = database_url() else { return };
    let (shared, start, go, end) = long_gate();
    let marker = shared.path().join("p.start");
    let body = |_: &std::path::Path| {
        format!(
            "[projects.long]\ncommand = {}\n[projects.p]\ncommand = {}\n",
            gated_command(&start, &go, &end, 0),
            quick_command(&marker)
        )
    };
    let first = pg_fleet(&url, body);
    let second = pg_fleet(&url, body);

    let mut d1 = first.start_daemon();
    let epoch1 = wait_epoch(&first, d1.pid(), 0);
    let long = first.enqueue("long");
    first.wait_until(DEADLINE, "long to start", || lines(&start).len() == 1);
    let host = first.status()["host"].as_str().unwrap().to_string();

    // Refused, by name, machine and pid, with the ways out; nothing written.
    let mut refused = second.spawn_daemon(&[]);
    second.wait_until(DEADLINE, "the second daemon to be refused", || {
        refused.try_exit().is_some()
    });
    let said = refused.stderr();
    assert_eq!(refused.try_exit().unwrap().code(), Some(1), "{said}");
    for part in [
        format!("host {host} is alive on machine {}", machine()),
        format!("pid {}", d1.pid()),
        "under another name (fleet daemon --host NAME)".to_string(),
        "stop that daemon first".to_string(),
        format!("fleet hosts forget {host}"),
    ] {
        assert!(
            said.contains(&part),
            "the refusal does not say {part:?}:\n{said}"
        );
    }
    // The first goes on untouched: same epoch, its run still running, new work run by it.
    d1.assert_alive();
    assert_eq!(first.status()["daemon"]["epoch"].as_i64(), Some(epoch1));
    let p = second.enqueue("p");
    assert_eq!(status_of(&first.wait_terminal(p)), "succeeded");
    assert_eq!(status_of(&first.run(long)), "running");
    assert!(
        !d1.stderr().contains("stale"),
        "the first daemon was fenced:\n{}",
        d1.stderr()
    );

    // A clean stop frees the name at once; the run in flight is left to its shim, which sees
    // its command to the end.
    d1.signal(Signal::TERM);
    first.wait_until(DEADLINE, "the first daemon to stop", || {
        d1.try_exit().is_some()
    });
    assert_eq!(d1.try_exit().unwrap().code(), Some(0), "{}", d1.stderr());
    std::fs::write(&go, "").unwrap();
    first.wait_until(DEADLINE, "long's command to end", || lines(&end).len() == 1);
    let mut d2 = second.start_daemon();
    let epoch2 = wait_epoch(&second, d2.pid(), epoch1);
    // Once a run of its own went through, the second daemon has recovered (nothing is claimed
    // before): it has no files of `long`, and leaves it as it is — neither lost nor queued
    // again as never started, which is what its empty files would say.
    let p = second.enqueue("p");
    assert_eq!(status_of(&second.wait_terminal(p)), "succeeded");
    let r = second.run(long);
    assert_eq!(status_of(&r), "running", "settled without its files: {r}");
    assert_eq!(lines(&start).len(), 1, "long started again");

    // Back where its files are, it is settled from them: it succeeded.
    d2.signal(Signal::TERM);
    second.wait_until(DEADLINE, "the second daemon to stop", || {
        d2.try_exit().is_some()
    });
    let d1 = first.start_daemon();
    let epoch3 = wait_epoch(&first, d1.pid(), epoch2);
    let r = first.wait_terminal(long);
    assert_eq!(status_of(&r), "succeeded", "{r}\n{}", first.diagnostics());
    assert_eq!(r["exit_code"].as_i64(), Some(0), "{r}");
    assert_check_ok(&first);
    eprintln!("epochs {epoch1}, {epoch2}, {epoch3}");
}

#[test]
fn a_silent_host_is_taken_over_and_its_daemon_fenced() {
    let Some(url) = database_url() else { return };
    // One marker for both: on a shared database the config in force is the published one (the
    // first daemon's), whichever daemon runs the command.
    let shared = tempfile::tempdir().unwrap();
    let marker = shared.path().join("p.start");
    let body =
        |_: &std::path::Path| format!("[projects.p]\ncommand = {}\n", quick_command(&marker));
    let first = pg_fleet(&url, body);
    let second = pg_fleet(&url, body);

    let mut d1 = first.start_daemon();
    let epoch1 = wait_epoch(&first, d1.pid(), 0);
    let host = first.status()["host"].as_str().unwrap().to_string();
    // Frozen past the liveness bound, by the database's clock.
    d1.signal(Signal::STOP);
    first.wait_until(DEADLINE, "the first host to be silent", || {
        let hosts: serde_json::Value =
            serde_json::from_str(&first.cmd_ok(&["hosts", "--json"])).unwrap();
        hosts
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["name"] == host.as_str() && h["state"] == "silent")
    });
    let d2 = second.start_daemon();
    let epoch2 = wait_epoch(&second, d2.pid(), epoch1);
    d1.signal(Signal::CONT);

    first.wait_until(DEADLINE, "the fenced daemon to stop", || {
        d1.try_exit().is_some()
    });
    let status = d1.try_exit().unwrap();
    assert_eq!(status.code(), Some(1), "{status}\n{}", d1.stderr());
    let said = d1.stderr();
    assert!(
        said.contains(&format!("epoch {epoch1} is stale"))
            && said.contains("daemon was taken over"),
        "the first daemon does not say it was fenced:\n{said}"
    );

    // The second daemon is in charge: a run queued from either side is run by it, once.
    let id = first.enqueue("p");
    let r = second.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(lines(&marker).len(), 1);
    eprintln!("epochs {epoch1} then {epoch2}");
}

/// A copy of a live host's state directory (`cp -a`: its files, its boot record, the run
/// files of the run in flight) is another place, on the same machine: a daemon started on the
/// copy is refused, and the live daemon and its run's command go on untouched — never settled,
/// nor killed as orphaned, by a daemon whose files are a copy.
#[test]
fn a_copy_of_a_live_state_directory_is_another_place() {
    let Some(url) = database_url() else { return };
    let (_shared, start, go, end) = long_gate();
    let body = |_: &std::path::Path| {
        format!(
            "[projects.long]\ncommand = {}\n",
            gated_command(&start, &go, &end, 0)
        )
    };
    let first = pg_fleet(&url, body);
    let copy = pg_fleet(&url, body);
    let mut d1 = first.start_daemon();
    let epoch1 = wait_epoch(&first, d1.pid(), 0);
    let long = first.enqueue("long");
    first.wait_until(DEADLINE, "long to start", || lines(&start).len() == 1);

    // `cp -a` may balk at the control socket; the rest is what matters.
    let _ = std::process::Command::new("cp")
        .arg("-a")
        .arg(first.state_dir())
        .arg(copy.state_dir())
        .status();
    assert!(copy.state_dir().join("boot").exists(), "the copy was made");
    let mut refused = copy.spawn_daemon(&[]);
    copy.wait_until(DEADLINE, "the daemon on the copy to be refused", || {
        refused.try_exit().is_some()
    });
    let said = refused.stderr();
    assert_eq!(refused.try_exit().unwrap().code(), Some(1), "{said}");
    assert!(
        said.contains("on this machine, from another state directory"),
        "{said}"
    );
    d1.assert_alive();
    assert_eq!(first.status()["daemon"]["epoch"].as_i64(), Some(epoch1));
    assert_eq!(status_of(&first.run(long)), "running");

    // Its command was never touched: it ends when told to, and the run with it.
    std::fs::write(&go, "").unwrap();
    let r = first.wait_terminal(long);
    assert_eq!(status_of(&r), "succeeded", "{r}\n{}", first.diagnostics());
    assert_eq!(lines(&start).len(), 1);
    assert_check_ok(&first);
    d1.signal(Signal::TERM);
    first.wait_until(DEADLINE, "the daemon to stop", || d1.try_exit().is_some());
}
