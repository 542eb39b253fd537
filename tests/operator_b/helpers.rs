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

/// `fleet ARGS` on a pseudo-terminal of `cols` columns (util-linux `script`; `stty` sets the
/// size, 0 for a terminal that reports 0×0), with `COLUMNS` as given or unset; what it printed,
/// without carriage returns. Panics unless it exits 0.
pub fn on_terminal(f: &Fleet, cols: usize, columns_env: Option<&str>, args: &[&str]) -> String {
    let fleet = f.command();
    let mut line = format!(
        "stty cols {cols} rows {rows} && exec {} --config {}",
        shell_quote(std::path::Path::new(fleet.get_program())),
        shell_quote(&f.config),
        rows = if cols == 0 { 0 } else { 50 },
    );
    for a in args {
        assert!(!a.contains('\''), "{a}");
        line += &format!(" '{a}'");
    }
    let mut c = std::process::Command::new("script");
    c.args(["-qec", &line, "/dev/null"])
        .current_dir(f.path())
        .env_remove("FLEET_CONFIG")
        .env_remove("COLUMNS");
    if let Some(v) = columns_env {
        c.env("COLUMNS", v);
    }
    let out = run_with_deadline(c, CMD_DEADLINE);
    assert_eq!(out.code(), Some(0), "{line}: {out:?}");
    out.stdout.replace('\r', "")
}
