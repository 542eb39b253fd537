//! Edits of fleet.toml and what the daemon made of them: its caps in force and its last reload
//! error (from `fleet status --json`, also while the file is invalid), runs and logs read through a
//! second config file, and barriers proving the daemon processed a reload or finished an EVAL.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::*;

/// An edit for the tests of what an edit does: the file is replaced by rename and `fleet reload`
/// is asked for too, so that those tests do not depend on the watcher (the `saves` tests do).
pub fn edit(f: &Fleet, text: &str) {
    f.replace_config(text);
    let out = f.cmd(&["reload"]);
    assert!(
        matches!(out.code(), Some(0 | 2)) && !out.stderr.contains("no daemon answers"),
        "fleet reload: {out:?}"
    );
}

/// `daemon.last_reload_error` of a `fleet status --json`.
pub fn reload_error(s: &Value) -> Option<String> {
    s["daemon"]["last_reload_error"].as_str().map(String::from)
}

/// The global cap in force, as `fleet status --json` shows it.
pub fn global_cap(s: &Value) -> Option<i64> {
    s["global"]["max_concurrency"].as_i64()
}

/// The declared namespaces in force: name → (max_concurrency, weight). (`fleet status` also lists
/// namespaces that only have active runs, with null caps; those are left out.)
pub fn declared(s: &Value) -> BTreeMap<String, (i64, i64)> {
    let mut out = BTreeMap::new();
    if let Some(map) = s["namespaces"].as_object() {
        for (name, v) in map {
            if let Some(cap) = v["max_concurrency"].as_i64() {
                out.insert(name.clone(), (cap, v["weight"].as_i64().unwrap_or(-1)));
            }
        }
    }
    out
}

/// Waits until `fleet status --json` satisfies `pred`; returns that status.
pub fn wait_status(f: &Fleet, what: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    f.wait_until(DEADLINE, what, || {
        last = status_any(f);
        pred(&last)
    });
    last
}

/// Waits until the daemon shows global cap `global` with no reload error (a good edit applied).
pub fn wait_applied(f: &Fleet, global: i64, what: &str) -> Value {
    wait_status(f, what, |s| {
        global_cap(s) == Some(global) && reload_error(s).is_none()
    })
}

/// `fleet status --json`, also while fleet.toml is invalid (it then still answers for the
/// daemon, 0 while it runs, with the file's errors in its report; 2 only when the file no
/// longer says where the state directory is, and then its JSON is the error).
pub fn status_any(f: &Fleet) -> Value {
    let out = f.cmd(&["status", "--json"]);
    assert!(
        matches!(out.code(), Some(0 | 2)),
        "fleet status --json: {out:?}"
    );
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("`fleet status --json` printed no JSON ({e}): {out:?}"))
}

/// `fleet --config probe.toml ARGS...`: probe.toml (empty: every default, so the same state
/// directory) lets the tests read runs and logs while fleet.toml is invalid, which `fleet runs`
/// and `fleet logs` refuse.
pub fn probe_cmd(f: &Fleet, args: &[&str]) -> Output {
    let probe = f.file("probe.toml");
    if !probe.exists() {
        std::fs::write(&probe, "").unwrap();
    }
    let mut c = f.command_with_config(&probe);
    c.args(args);
    run_with_deadline(c, CMD_DEADLINE)
}

/// [`probe_cmd`], asserting exit status 0; returns stdout.
pub fn probe_ok(f: &Fleet, args: &[&str]) -> String {
    let out = probe_cmd(f, args);
    assert_eq!(
        out.code(),
        Some(0),
        "fleet --config probe.toml {args:?}: {out:?}"
    );
    out.stdout
}

/// One run, whatever state fleet.toml is in.
pub fn run_any(f: &Fleet, id: i64) -> Value {
    let out = probe_ok(f, &["runs", "--json", "--limit", "100000"]);
    let runs: Vec<Value> = serde_json::from_str(&out).unwrap();
    runs.into_iter()
        .find(|r| r["id"].as_i64() == Some(id))
        .unwrap_or_else(|| panic!("run {id} is not in `fleet runs --json`"))
}

/// A run's log, whatever state fleet.toml is in.
pub fn logs_any(f: &Fleet, id: i64) -> String {
    probe_ok(f, &["logs", &id.to_string()])
}

/// Waits until run `id` has ended, whatever state fleet.toml is in.
pub fn wait_terminal_any(f: &Fleet, id: i64) -> Value {
    let mut last = Value::Null;
    f.wait_until(DEADLINE, &format!("run {id} to end"), || {
        last = run_any(f, id);
        is_terminal(&last)
    });
    last
}

/// One reload asked with `fleet reload` and seen processed (the daemon row rewritten).
pub fn reload_round_trip(f: &Fleet) {
    let before = daemon_updated_at(f);
    // Exit 2 (an invalid file) still reaches the daemon, which records the refusal.
    let out = f.cmd(&["reload"]);
    assert!(
        matches!(out.code(), Some(0 | 2)) && !out.stderr.contains("no daemon answers"),
        "fleet reload: {out:?}"
    );
    f.wait_until(DEADLINE, "a reload to be processed", || {
        daemon_updated_at(f) != before
    });
}

/// Starts the daemon and waits until its loop runs. The harness returns once the control
/// socket is bound, but the file watcher is set up just after: one processed reload proves the
/// loop (hence the watcher) is running, so that edits made next are not missed (see
/// `saves::an_edit_saved_while_the_daemon_starts_is_applied`).
pub fn start(f: &Fleet) -> Daemon<'_> {
    let d = f.start_daemon();
    reload_round_trip(f);
    d
}

/// Proof that the daemon completed at least one whole EVAL that began after this call: its loop
/// is `reload (if asked) → EVAL`, and every reload rewrites the daemon row, so once the second of
/// two reloads asked for here is seen, the EVAL after the first has finished. Only used when the
/// file is not being edited (so no watcher-driven reload is in flight).
pub fn eval_barrier(f: &Fleet) {
    reload_round_trip(f);
    reload_round_trip(f);
}

/// Waits until every listed run has ended; asserts each `succeeded` with exit code 0.
pub fn assert_all_succeed(f: &Fleet, ids: &[i64]) {
    for &id in ids {
        let r = wait_terminal_any(f, id);
        assert_eq!(
            status_of(&r),
            "succeeded",
            "run {id} should have succeeded: {r}\n{}",
            f.diagnostics()
        );
        assert_eq!(r["exit_code"], 0, "run {id}: {r}");
    }
}
