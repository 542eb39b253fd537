//! What does not report to a hook: a success, a cancel, and a hook's own failure (also when the
//! hook project reports to itself); and a config naming an unknown hook project is refused.

use super::{recording_hook, runs_of, wait_ended_runs};
use crate::common::*;

/// A project whose hook is itself: its failure makes one hook run, whose own failure (and its
/// retry's) makes no other.
#[test]
fn a_failing_hook_ends_the_chain() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.selfish]\ncommand = {}\nretries = 1\nretry_backoff = \"100ms\"\n\
             on_failure = \"selfish\"\n",
            recording_hook(dir, 7)
        )
    });
    let _d = f.start_daemon();
    let first = f.enqueue("selfish");
    // The first run and its retry fail; the hook run and its retry fail.
    let runs = wait_ended_runs(&f, "selfish", 4);
    let triggers: Vec<&str> = runs
        .iter()
        .map(|r| r["trigger"].as_str().unwrap())
        .collect();
    assert_eq!(
        triggers,
        ["manual", "retry", "on_failure", "retry"],
        "{runs:#?}"
    );
    assert!(runs.iter().all(|r| r["status"] == "failed"), "{runs:#?}");
    assert_eq!(runs[2]["hook_of"], runs[1]["id"], "{runs:#?}");
    assert_eq!(
        runs[3]["hook_of"], runs[1]["id"],
        "a hook's retry reports the same run"
    );
    assert_eq!(runs[0]["id"], first);
    // Every hook is queued by the transaction that ends the run it reports: with every run
    // ended, no other can come.
    assert_eq!(runs_of(&f, "selfish").len(), 4, "{:#?}", f.runs());
    assert_check_ok(&f);
}

/// A success and a cancel are not failures.
#[test]
fn success_and_cancel_report_nothing() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.fine]\ncommand = {fine}\non_failure = \"alert\"\n\n\
             [projects.long]\ncommand = {long}\non_failure = \"alert\"\n\n\
             [projects.alert]\ncommand = {hook}\n",
            fine = sh("exit 0"),
            long = sh("sleep 30"),
            hook = recording_hook(dir, 0),
        )
    });
    let _d = f.start_daemon();
    let fine = f.enqueue("fine");
    assert_eq!(status_of(&f.wait_terminal(fine)), "succeeded");
    let long = f.enqueue("long");
    f.wait_status(long, "running");
    f.cmd_ok(&["cancel", &long.to_string()]);
    assert_eq!(status_of(&f.wait_terminal(long)), "cancelled");
    assert!(runs_of(&f, "alert").is_empty(), "{:#?}", f.runs());
}

/// `on_failure` must name a project of the file: the error names the file, line and key.
#[test]
fn unknown_hook_project_is_a_config_error() {
    let f = Fleet::new("[projects.a]\ncommand = [\"true\"]\non_failure = \"nobody\"\n");
    let out = f.cmd(&["validate"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains(":3:") && out.stderr.contains("projects.a.on_failure"),
        "{out:?}"
    );
    assert!(out.stderr.contains("nobody"), "{out:?}");
}

/// A rerun of a hook run is still a hook run: it reports the same failed run (its
/// `FLEET_FAILED_*` variables) and its own failure queues no other hook.
#[test]
fn a_rerun_of_a_hook_run_stays_a_hook_run() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.job]\ncommand = [\"false\"]\non_failure = \"alert\"\n\n\
             [projects.alert]\ncommand = {}\non_failure = \"alert\"\n",
            recording_hook(dir, 3)
        )
    });
    let _d = f.start_daemon();
    let failed = f.enqueue("job");
    let hooks = wait_ended_runs(&f, "alert", 1);
    let hook = hooks[0]["id"].as_i64().unwrap();
    assert_eq!(hooks[0]["hook_of"], failed, "{hooks:#?}");
    let rerun: i64 = f
        .cmd_ok(&["rerun", &hook.to_string()])
        .trim()
        .parse()
        .unwrap();
    let ended = f.wait_terminal(rerun);
    assert_eq!(ended["status"], "failed", "{ended:#?}");
    assert_eq!(
        ended["hook_of"], failed,
        "the rerun reports the same run: {ended:#?}"
    );
    assert_eq!(
        super::recorded_env(f.path(), rerun),
        super::recorded_env(f.path(), hook),
        "the rerun sees the failed run's variables, as the hook run did"
    );
    // The rerun's end committed whatever hook it would queue: none may exist.
    assert_eq!(runs_of(&f, "alert").len(), 2, "{:#?}", f.runs());
    assert_check_ok(&f);
}
