//! End-to-end tests of failure hooks (`on_failure`): a run that ends failed, timed_out or lost
//! with no retry left queues exactly one run of its hook project, whose environment carries the
//! failed run's fields, whether the end was seen by the daemon that ran it or found by the
//! recovery of the next one after a crash; and a hook's own failure ends the chain. A retry or
//! hook's run the database refuses costs only that run its retry or hook (`refused`).
//!
//! Run with `cargo test --all-features --test e2e hooks::` (the crash test injects a
//! failpoint).

mod chain;
mod env;
mod recovery;
mod refused;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::common::*;

/// A hook command that writes its `FLEET_FAILED_*` variables, one `KEY=VALUE` a line, sorted, to
/// `<dir>/hook-<its run id>`, then exits `code`.
pub fn recording_hook(dir: &Path, code: i32) -> String {
    sh(&format!(
        "env | grep '^FLEET_FAILED_' | sort > {dir}/hook-$FLEET_RUN_ID; exit {code}",
        dir = shell_quote(dir)
    ))
}

/// What the hook run `id` recorded with [`recording_hook`], by variable.
pub fn recorded_env(dir: &Path, id: i64) -> BTreeMap<String, String> {
    std::fs::read_to_string(dir.join(format!("hook-{id}")))
        .unwrap_or_else(|e| panic!("hook run {id} recorded nothing: {e}"))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The runs of `project`, oldest first.
pub fn runs_of(f: &Fleet, project: &str) -> Vec<Value> {
    let mut runs: Vec<Value> = f
        .runs()
        .into_iter()
        .filter(|r| r["project"] == project)
        .collect();
    runs.reverse();
    runs
}

/// Waits until `project` has `n` runs, all ended, and returns them, oldest first.
pub fn wait_ended_runs(f: &Fleet, project: &str, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    f.wait_until(DEADLINE, &format!("{n} ended runs of {project}"), || {
        out = runs_of(f, project);
        out.len() >= n && out.iter().all(is_terminal)
    });
    out
}

/// The variables a hook of the failed run `failed` (its `fleet runs --json` object) must see.
pub fn expected_env(f: &Fleet, failed: &Value) -> BTreeMap<String, String> {
    let id = failed["id"].as_i64().unwrap();
    let mut want = BTreeMap::from([
        ("FLEET_FAILED_RUN_ID".to_string(), id.to_string()),
        (
            "FLEET_FAILED_PROJECT".to_string(),
            failed["project"].as_str().unwrap().to_string(),
        ),
        (
            "FLEET_FAILED_STATUS".to_string(),
            failed["status"].as_str().unwrap().to_string(),
        ),
        (
            "FLEET_FAILED_LOG".to_string(),
            log_path(f, id).display().to_string(),
        ),
    ]);
    if let Some(code) = failed["exit_code"].as_i64() {
        want.insert("FLEET_FAILED_EXIT_CODE".into(), code.to_string());
    }
    if let Some(signal) = failed["signal"].as_i64() {
        want.insert("FLEET_FAILED_SIGNAL".into(), signal.to_string());
    }
    want
}
