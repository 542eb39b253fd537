//! `fleet prune [--dry-run]`: applies `keep_runs` and `keep_for` now, all at once, whether or
//! not a daemon runs (it only forgets ended runs, which no daemon holds anything of; see
//! `supervisor::prune`). Prints one line per run (let go, or with `--dry-run` that would be),
//! then a summary. A run whose files cannot be removed is kept and named, the others pruned,
//! and the exit status is 1. On a shared database, only the runs this host ran (and runs that
//! never started): each host prunes its own, whose files are on its disk.

use crate::console;
use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};

/// What `fleet prune` was asked.
#[derive(clap::Args, Debug)]
pub struct PruneArgs {
    /// Only list the runs that would be pruned.
    #[arg(long)]
    pub dry_run: bool,
}

/// `fleet prune [--dry-run]`.
///
/// Errors: an invalid config (exit 2); the database failing, or a run's files that cannot be
/// removed (exit 1, naming it; the other runs are pruned, and what was pruned stays pruned).
pub fn prune(ctx: &Ctx, args: &PruneArgs) -> Result<()> {
    let dry_run = args.dry_run;
    // The prune failpoint (feature `failpoints`) also stops a hand-run prune midway in tests.
    let _failpoints = supervisor::failpoints::scenario().map_err(Failure::input)?;
    let state = ctx.state(IfInvalid::Refuse)?;
    let config = ctx::as_this_host(ctx.config()?, &state);
    // A dry run only reads.
    let opened = if dry_run {
        ctx::open_existing(&state)?
    } else {
        ctx::open_existing_to_write(&state)?
    };
    let Some(store) = opened else {
        return console::println(format_args!(
            "nothing to prune: no database at {}",
            state.db_path().display()
        ));
    };
    let policy = supervisor::prune::policy(&config, store::now_ms());
    if let Some(host) = &policy.host {
        // A run's files are on the host that ran it: other hosts' runs are theirs to prune.
        console::println(format_args!(
            "host {host}: pruning the runs this host ran and runs that never started \
             (other hosts prune their own)"
        ))?;
    }
    let verb = if dry_run { "would prune" } else { "pruned" };
    // Each batch's lines go out (flushed) as soon as its rows are forgotten: a prune killed or
    // failing midway has still said what it did.
    let pruned = supervisor::prune::prune_all(
        state.root(),
        &store,
        &policy,
        dry_run,
        |batch: &supervisor::prune::Pruned| -> Result<()> {
            let mut text = String::new();
            for run in &batch.runs {
                text.push_str(&format!(
                    "{verb} run {} ({}, ended {})\n",
                    run.id,
                    run.project,
                    store::rfc3339(run.finished_at)
                ));
            }
            console::print(&text)
        },
    )?;
    let mut text = String::new();
    for id in &pruned.locked {
        text.push_str(&format!(
            "kept run {id}: a shim still holds its lock or its folder is in use (pruned later)\n"
        ));
    }
    let n = pruned.runs.len();
    text.push_str(&format!(
        "{verb} {n} run{}\n",
        if n == 1 { "" } else { "s" }
    ));
    console::print(&text)?;
    // The others were pruned; the ones left say why, and the exit status says something is
    // wrong (naming the first file).
    for f in pruned.failed.iter().skip(1) {
        console::eprintln(format_args!("fleet: {f}"));
    }
    match pruned.failed.first() {
        Some(f) => Err(Failure::action(format!(
            "{f} (kept; the others were pruned)"
        ))),
        None => Ok(()),
    }
}
