//! Helpers of this group: waiting for the daemon to complete EVALs, and reading runs.

use serde_json::Value;

use crate::common::*;

/// Returns once the daemon has completed at least `n` EVALs from now: each `fleet reload`
/// rewrites the daemon row's `updated_at` after the EVAL before it, so seeing reload k+1's
/// effect means the EVAL after reload k finished.
pub fn eval_barrier(f: &Fleet, n: usize) {
    for i in 0..=n {
        let before = daemon_updated_at(f);
        // Retried: right after a restart the control socket may not be bound yet.
        f.wait_until(DEADLINE, "`fleet reload` to reach the daemon", || {
            f.cmd(&["reload"]).code() == Some(0)
        });
        f.wait_until(DEADLINE, &format!("reload {i} of the EVAL barrier"), || {
            daemon_updated_at(f) != before
        });
    }
}

/// The runs of `project`, newest first, as `fleet runs --json` shows them.
pub fn runs_of(f: &Fleet, project: &str) -> Vec<Value> {
    f.runs_with(&["--project", project])
}

/// A recording command that exits at once (see [`recorder_script`]).
pub fn quick(dir: &std::path::Path, rec: &str) -> String {
    sh(&recorder_script(&dir.join(rec), "0"))
}
