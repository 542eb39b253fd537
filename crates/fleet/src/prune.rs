//! `fleet prune [--dry-run]`: applies `keep_runs` and `keep_for` now, all at once, whether or
//! not a daemon runs (it only forgets ended runs, which no daemon holds anything of; see
//! `supervisor::prune`). Prints one line per run (let go, or with `--dry-run` that would be),
//! then a summary.

use std::path::Path;

use crate::cli::{load, open_existing_at, state_of, Failure, Result};
use crate::console;

/// `fleet prune [--dry-run]`.
///
/// Errors: an invalid config (exit 2); the database or a run folder failing (exit 1, naming
/// it; what was pruned before stays pruned).
pub fn prune(path: &Path, dry_run: bool) -> Result<()> {
    let config = load(path)?;
    let state = state_of(path)?;
    let Some(store) = open_existing_at(&state)? else {
        return console::println(format_args!(
            "nothing to prune: no database at {}",
            state.db_path().display()
        ));
    };
    let policy = supervisor::prune::policy(&config, store::now_ms());
    let pruned = supervisor::prune::prune_all(state.root(), &store, &policy, dry_run)
        .map_err(Failure::action)?;
    let verb = if dry_run { "would prune" } else { "pruned" };
    let mut text = String::new();
    for run in &pruned.runs {
        text.push_str(&format!(
            "{verb} run {} ({}, ended {})\n",
            run.id,
            run.project,
            store::rfc3339(run.finished_at)
        ));
    }
    for id in &pruned.locked {
        text.push_str(&format!(
            "kept run {id}: a shim still holds its lock (pruned later)\n"
        ));
    }
    let n = pruned.runs.len();
    text.push_str(&format!(
        "{verb} {n} run{}\n",
        if n == 1 { "" } else { "s" }
    ));
    console::print(&text)
}
