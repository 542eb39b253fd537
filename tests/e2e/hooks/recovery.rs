//! Failures found by recovery: a run whose command ended (or whose shim died) while no daemon
//! ran reports once, to the next daemon; and a daemon that crashes around the write of a
//! failed end neither loses the hook nor queues it twice.

use std::path::Path;

use super::{expected_env, recorded_env, recording_hook, runs_of, wait_ended_runs};
use crate::common::*;

/// A command that appends its run id to `start`, waits for `go` to exist, and exits `code`.
fn gated(start: &Path, go: &Path, code: i32) -> String {
    sh(&format!(
        "echo $FLEET_RUN_ID >> {start}; while [ ! -e {go} ]; do sleep 0.05; done; exit {code}",
        start = shell_quote(start),
        go = shell_quote(go),
    ))
}

fn config(dir: &Path) -> String {
    format!(
        "[projects.held]\ncommand = {held}\non_failure = \"alert\"\n\n\
         [projects.alert]\ncommand = {hook}\n",
        held = gated(&dir.join("started"), &dir.join("GO"), 5),
        hook = recording_hook(dir, 0),
    )
}

/// Waits until run `id`'s shim and command are gone (its run files then say how it ended).
fn wait_processes_gone(f: &Fleet) {
    f.wait_until(DEADLINE, "the shim and its command to exit", || {
        marked_pids(&f.marker)
            .into_iter()
            .all(|pid| is_zombie(pid) || process_gone(pid))
    });
}

/// The command fails while the daemon is down (killed with SIGKILL): the next daemon's recovery
/// writes the end and queues the hook, once.
#[test]
fn failure_found_by_recovery_reports_once() {
    let f = Fleet::with(config);
    let mut d1 = f.start_daemon();
    let held = f.enqueue("held");
    f.wait_status(held, "running");
    f.wait_until(DEADLINE, "the command to start", || {
        f.file("started").exists()
    });
    d1.kill();
    std::fs::write(f.file("GO"), "").unwrap();
    wait_processes_gone(&f);
    assert!(runs_of(&f, "alert").is_empty());

    let _d2 = f.start_daemon();
    let failed = f.wait_terminal(held);
    assert_eq!(status_of(&failed), "failed", "{failed}");
    let alerts = wait_ended_runs(&f, "alert", 1);
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    assert_eq!(alerts[0]["trigger"], "on_failure");
    assert_eq!(alerts[0]["hook_of"], held);
    let env = recorded_env(f.path(), alerts[0]["id"].as_i64().unwrap());
    assert_eq!(env, expected_env(&f, &failed));
    assert_eq!(env["FLEET_FAILED_EXIT_CODE"], "5");
    assert_check_ok(&f);
}

/// The shim and its command are killed while the daemon is down: recovery finds the run `lost`,
/// which reports with no exit code.
#[test]
fn lost_run_found_by_recovery_reports_once() {
    let f = Fleet::with(config);
    let mut d1 = f.start_daemon();
    let held = f.enqueue("held");
    f.wait_status(held, "running");
    f.wait_until(DEADLINE, "the command to start", || {
        f.file("started").exists()
    });
    d1.kill();
    for pid in marked_pids(&f.marker) {
        let _ = send_signal(pid, Signal::KILL);
    }
    wait_processes_gone(&f);

    let _d2 = f.start_daemon();
    let lost = f.wait_terminal(held);
    assert_eq!(status_of(&lost), "lost", "{lost}");
    let alerts = wait_ended_runs(&f, "alert", 1);
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    let env = recorded_env(f.path(), alerts[0]["id"].as_i64().unwrap());
    assert_eq!(env, expected_env(&f, &lost));
    assert!(!env.contains_key("FLEET_FAILED_EXIT_CODE"), "{env:?}");
    assert_check_ok(&f);
}

/// The next daemon aborts right before, or right after, the transaction that writes the failed
/// end its recovery found (and before recovery hands it over): the daemon after it writes the end
/// and its hook, or finds both written, and either way there is exactly one hook run.
#[test]
fn crash_around_the_failed_end_neither_loses_nor_doubles_the_hook() {
    for failpoint in [
        "recovery-before-apply",
        "daemon-before-finalize",
        "daemon-after-finalize",
    ] {
        let f = Fleet::with(config);
        let mut d1 = f.start_daemon();
        let held = f.enqueue("held");
        f.wait_status(held, "running");
        d1.kill();
        std::fs::write(f.file("GO"), "").unwrap();
        wait_processes_gone(&f);
        // Recovery settles the run, and the first EVAL writes it: the failpoint is met there.
        let mut d2 = f.spawn_daemon(&[("FAILPOINTS", &format!("{failpoint}=return"))]);
        f.wait_until(
            DEADLINE,
            &format!("the daemon to abort at {failpoint}"),
            || d2.try_exit().is_some(),
        );
        let _d3 = f.start_daemon();
        assert_eq!(status_of(&f.wait_terminal(held)), "failed", "{failpoint}");
        let alerts = wait_ended_runs(&f, "alert", 1);
        assert_eq!(alerts.len(), 1, "{failpoint}: {alerts:#?}");
        assert_eq!(alerts[0]["hook_of"], held, "{failpoint}");
        assert_eq!(alerts[0]["status"], "succeeded", "{failpoint}");
        assert_check_ok(&f);
    }
}
