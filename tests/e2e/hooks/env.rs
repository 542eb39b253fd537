//! The hook's run: one per failure with no retry left, trigger `on_failure`, `hook_of` the failed
//! run, and the failed run's fields in its environment.

use super::{expected_env, recorded_env, recording_hook, runs_of, wait_ended_runs};
use crate::common::*;

/// A project that fails twice (one retry) reports once, after its last attempt, with that
/// attempt's id, status, exit code and log; a timed-out one reports its signal.
#[test]
fn last_failed_attempt_queues_one_hook_with_its_fields() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.bad]\ncommand = {bad}\nretries = 1\nretry_backoff = \"100ms\"\n\
             on_failure = \"alert\"\n\n\
             [projects.slow]\ncommand = {slow}\ntimeout = \"300ms\"\nkill_grace = \"0s\"\n\
             on_failure = \"alert\"\n\n\
             [projects.alert]\ncommand = {hook}\n",
            bad = sh("echo failing; exit 3"),
            slow = sh("sleep 30"),
            hook = recording_hook(dir, 0),
        )
    });
    let _d = f.start_daemon();
    f.enqueue("bad");
    let bad = wait_ended_runs(&f, "bad", 2);
    assert!(bad.iter().all(|r| r["status"] == "failed"), "{bad:#?}");
    let alerts = wait_ended_runs(&f, "alert", 1);
    assert_eq!(alerts.len(), 1, "one hook run for one failure: {alerts:#?}");
    let alert = &alerts[0];
    assert_eq!(alert["trigger"], "on_failure", "{alert}");
    assert_eq!(alert["status"], "succeeded", "{alert}");
    assert_eq!(
        alert["hook_of"], bad[1]["id"],
        "reports the last attempt: {alert}"
    );
    let id = alert["id"].as_i64().unwrap();
    let env = recorded_env(f.path(), id);
    assert_eq!(env, expected_env(&f, &bad[1]));
    assert_eq!(env["FLEET_FAILED_EXIT_CODE"], "3");
    assert!(!env.contains_key("FLEET_FAILED_SIGNAL"), "{env:?}");
    let log = std::fs::read_to_string(&env["FLEET_FAILED_LOG"]).unwrap();
    assert!(log.contains("failing"), "the failed run's log: {log:?}");

    f.enqueue("slow");
    let slow = wait_ended_runs(&f, "slow", 1);
    assert_eq!(slow[0]["status"], "timed_out", "{slow:#?}");
    let alerts = wait_ended_runs(&f, "alert", 2);
    assert_eq!(alerts.len(), 2, "{alerts:#?}");
    assert_eq!(alerts[1]["hook_of"], slow[0]["id"]);
    let env = recorded_env(f.path(), alerts[1]["id"].as_i64().unwrap());
    assert_eq!(env, expected_env(&f, &slow[0]));
    assert_eq!(env["FLEET_FAILED_STATUS"], "timed_out");
    assert_eq!(runs_of(&f, "bad").len(), 2, "the hook is not a retry");
    assert_check_ok(&f);
}

/// An ordinary run never sees the variables, even when the daemon's own environment has them
/// (a daemon started by a hook of another fleet).
#[test]
fn other_runs_see_no_failed_run_variables() {
    let f = Fleet::with(|dir| format!("[projects.plain]\ncommand = {}\n", recording_hook(dir, 0)));
    let _d = f.start_daemon_env(&[("FLEET_FAILED_RUN_ID", "99"), ("FLEET_FAILED_LOG", "x")]);
    let id = f.enqueue("plain");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(r["hook_of"], serde_json::Value::Null);
    assert!(recorded_env(f.path(), id).is_empty());
}

/// A command that cannot be started at all (a missing program) fails, and reports like any
/// other failure: no exit code, its log holding the error.
#[test]
fn a_command_that_cannot_start_reports_too() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.missing]\ncommand = [\"/nonexistent/program\"]\non_failure = \"alert\"\n\n\
             [projects.alert]\ncommand = {}\n",
            recording_hook(dir, 0)
        )
    });
    let _d = f.start_daemon();
    let id = f.enqueue("missing");
    let failed = f.wait_terminal(id);
    assert_eq!(status_of(&failed), "failed", "{failed}");
    let alerts = wait_ended_runs(&f, "alert", 1);
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    let env = recorded_env(f.path(), alerts[0]["id"].as_i64().unwrap());
    assert_eq!(env, expected_env(&f, &failed));
    assert!(!env.contains_key("FLEET_FAILED_EXIT_CODE"), "{env:?}");
}
