//! Runs as `fleet runs --json` shows them: fields, occurrences, skips, and which runs held a
//! project at an instant.

use serde_json::Value;

use crate::common::time::parse_rfc3339;
use crate::common::*;

/// A string field of a run (`""` when null).
pub fn s<'a>(r: &'a Value, k: &str) -> &'a str {
    r[k].as_str().unwrap_or("")
}

/// A run's id.
pub fn id(r: &Value) -> i64 {
    r["id"].as_i64().expect("run id")
}

/// A time field of a run (ms), or None when null.
pub fn t(r: &Value, k: &str) -> Option<i64> {
    r[k].as_str().map(parse_rfc3339)
}

/// A run's occurrence (ms), or None for a run without one.
pub fn occ(r: &Value) -> Option<i64> {
    t(r, "occurrence")
}

/// The project's runs, oldest first.
pub fn runs_of(f: &Fleet, project: &str) -> Vec<Value> {
    let mut v = f.runs_with(&["--project", project]);
    v.sort_by_key(id);
    v
}

/// A run recording a skipped occurrence: cancelled, never started, reason "skipped: …".
pub fn is_skip(r: &Value) -> bool {
    s(r, "status") == "cancelled" && s(r, "reason").starts_with("skipped:")
}

/// Runs, one JSON line each, for failure messages.
pub fn show(runs: &[Value]) -> String {
    runs.iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs of `runs` (other than `except`, and not skips) certainly queued or active at `at`:
/// enqueued before it, their command ended after it.
pub fn holders_at(runs: &[Value], at: i64, except: i64) -> Vec<i64> {
    runs.iter()
        .filter(|r| id(r) != except && !is_skip(r))
        .filter(|r| {
            let (q, e) = (t(r, "enqueued_at").unwrap(), t(r, "finished_at"));
            q < at && e.is_none_or(|e| e > at)
        })
        .map(id)
        .collect()
}
