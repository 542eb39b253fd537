//! End-to-end tests of what the operator reads: the `fleet runs` filters and layout, and
//! `fleet projects`.
//!
//! Every test drives the real `fleet` binary (see tests/e2e/common/mod.rs). One module per
//! view:
//! - `runs`: filters, the layout at 80 columns, the plain form for pipes;
//! - `projects`: the projects view, text and JSON.
//!
//! `on_terminal` here runs a `fleet` command on a pseudo-terminal of a given width.

mod projects;
mod runs;

use crate::common::*;

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
