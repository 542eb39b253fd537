//! `fleet check [--json]`: the restart-safety auditor (`supervisor::audit`) over the state
//! directory and its database, its report as text or JSON, and exit 1 when it found
//! violations.

use serde_json::json;

use crate::console;
use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};

/// What `fleet check` was asked.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `fleet check`: the restart-safety checker.
pub fn check(ctx: &Ctx, args: &CheckArgs) -> Result<()> {
    let json = args.json;
    let state = ctx.state(IfInvalid::Refuse)?;
    let Some(store) = ctx::open_existing(&state)? else {
        // Say so: a mistyped state_dir must not pass for a clean install.
        let note = format!(
            "nothing to check: no database at {}",
            state.db_path().display()
        );
        return if json {
            console::println(nothing_json(&note))
        } else {
            console::println(format_args!("ok: {note}"))
        };
    };
    // Each project's max_parallel, when the config reads (with --state-dir it may not).
    let config = ctx.config_if_valid().map(|c| ctx::as_this_host(c, &state));
    let report = supervisor::audit::audit(&state, &store, store::now_ms(), config.as_ref())
        .map_err(Failure::action)?;
    if json {
        console::println(report_json(&report))?;
    } else {
        console::print(&report_text(&report))?;
    }
    if report.ok() {
        Ok(())
    } else {
        let n = report.violations.len();
        Err(Failure::action(format!(
            "check found {n} violation{}",
            if n == 1 { "" } else { "s" }
        ))
        .reported())
    }
}

/// `fleet check --json`.
fn report_json(report: &supervisor::audit::Report) -> String {
    json!({
        "ok": report.ok(),
        "violations": report.violations.iter().map(|v| json!({
            "kind": v.kind.as_str(),
            "run_id": v.run_id,
            "message": v.message,
        })).collect::<Vec<_>>(),
        "checked": {"runs": report.runs, "events": report.events, "run_dirs": report.run_dirs},
        "awaiting_finalize": report.awaiting_finalize,
        "orphaned": report.orphaned.iter().map(|(run, pgid)| json!({"run_id": run, "pgid": pgid})).collect::<Vec<_>>(),
        "note": null,
    })
    .to_string()
}

/// `fleet check --json` when there is nothing to check (no database): the same shape, with
/// nothing checked and `note` saying why.
fn nothing_json(note: &str) -> String {
    json!({
        "ok": true,
        "violations": [],
        "checked": {"runs": 0, "events": 0, "run_dirs": 0},
        "awaiting_finalize": [],
        "orphaned": [],
        "note": note,
    })
    .to_string()
}

/// `fleet check` for a person.
fn report_text(report: &supervisor::audit::Report) -> String {
    let mut s = String::new();
    for v in &report.violations {
        s += &format!("violation: {}: {}\n", v.kind.as_str(), v.message);
    }
    if !report.awaiting_finalize.is_empty() {
        let ids = &report.awaiting_finalize;
        // Usually a run that ended while no daemon ran; with a daemon running, one that
        // ended since its last EVAL, or whose end the database refuses (its log says so).
        s += &if ids.len() == 1 {
            format!(
                "note: run {} has ended: its files hold its exit, the database not yet; a daemon \
                 records it (the running one at its next EVAL, else the next to start; its log \
                 says if the database refuses it)\n",
                ids[0]
            )
        } else {
            format!(
                "note: runs {} have ended: their files hold their exits, the database not yet; \
                 a daemon records them (the running one at its next EVAL, else the next to \
                 start; its log says if the database refuses them)\n",
                supervisor::audit::plain_list(ids)
            )
        };
    }
    for (run, pgid) in &report.orphaned {
        s += &format!(
            "note: run {run}'s shim is gone, or its files no longer show it, but its command's \
             process group {pgid} still runs; the run stays active until the group is empty \
             (the daemon kills the group when the run's files identify it)\n"
        );
    }
    s += &format!(
        "{}: {} runs, {} events, files of {} runs checked\n",
        if report.ok() { "ok" } else { "FAILED" },
        report.runs,
        report.events,
        report.run_dirs
    );
    s
}
