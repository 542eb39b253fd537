//! Runs as JSON: the one shape `fleet runs --json` prints and the daemon's `/api/` serves, so
//! that a script written against one reads the other.
//!
//! Pure: it formats what it is given and reads nothing (no clock, no database).

use serde_json::{json, Value};
use store::{rfc3339, Millis, Run};

/// An optional instant ([`Millis`], UTC) as RFC 3339, or `null`.
pub fn time_json(ms: Option<Millis>) -> Value {
    ms.map(|m| Value::String(rfc3339(m))).unwrap_or(Value::Null)
}

/// One run as a JSON object (the fields are documented in docs/REFERENCE.md).
pub fn run_json(r: &Run) -> Value {
    json!({
        "id": r.id,
        "project": r.project,
        "namespace": r.namespace,
        "status": r.status.as_str(),
        "attempt": r.attempt,
        "trigger": r.trigger.as_str(),
        "occurrence": time_json(r.occurrence),
        "priority": r.priority,
        "pid": r.pid,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "reason": r.reason,
        "cancel_requested": r.cancel_requested,
        "enqueued_at": time_json(Some(r.enqueued_at)),
        "not_before": if r.not_before > 0 { time_json(Some(r.not_before)) } else { Value::Null },
        "started_at": time_json(r.started_at),
        "finished_at": time_json(r.finished_at),
        "args": r.args,
        "env": env_json(&r.env),
        "retry_of": r.retry_of,
        "rerun_of": r.rerun_of,
        "hook_of": r.hook_of,
        "host": r.host,
    })
}

/// A run's own environment variables as one JSON object (name → value).
fn env_json(env: &[(String, String)]) -> Value {
    Value::Object(
        env.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}
