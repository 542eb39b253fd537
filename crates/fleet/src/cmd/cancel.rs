//! `fleet cancel`: one run, several by id, or every run not ended yet of a project, a namespace
//! or the install (`--queued`: queued runs only). A queued run is cancelled at once; an active
//! one gets a cancel request, which its daemon carries out (it ends `cancelled` once its
//! process is gone).
//!
//! The writes go to the database, which works whether or not a daemon runs; a nudge then tells
//! the daemon to look now, and a missing daemon is never an error here.

use std::collections::HashSet;

use store::{CancelOutcome, CancelSelection, RunId, Store, StoreError};
use supervisor::statedir::StateDir;

use crate::console;
use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};

/// What `fleet cancel` was asked: ids, or exactly one selection.
#[derive(clap::Args, Debug)]
// A group of its own (not the struct's implicit one, which would hold `--queued` too): exactly
// one way to say which runs.
#[command(group(
    clap::ArgGroup::new("which")
        .required(true)
        .args(["runs", "project", "namespace", "all"])
))]
pub struct CancelArgs {
    /// Run ids.
    #[arg(value_name = "RUN")]
    pub runs: Vec<RunId>,
    /// Every run of this project not ended yet.
    #[arg(long, value_name = "NAME")]
    pub project: Option<String>,
    /// Every run of this namespace not ended yet.
    #[arg(long, value_name = "NAME")]
    pub namespace: Option<String>,
    /// Every run not ended yet.
    #[arg(long)]
    pub all: bool,
    /// Only queued runs: leave active ones alone.
    #[arg(long)]
    pub queued: bool,
}

/// The reason a cancelled run records.
const REASON: &str = "cancelled by operator";

/// What is said of an active run once its cancel is requested and a daemon took the nudge.
const REQUESTED: &str = "cancel requested; it ends `cancelled` once its process is gone";

/// `fleet cancel`: one id keeps its historical answer ([`cancel_one`]); several ids, or a
/// selection, print one line per run reached.
///
/// Errors: an unknown id (exit 2, before anything is cancelled); a project or namespace the
/// config does not name and no run carries (exit 2); a run given by id that had already ended
/// (exit 1, after the others were cancelled); the database (exit 1).
pub fn cancel(ctx: &Ctx, args: CancelArgs) -> Result<()> {
    let CancelArgs {
        mut runs,
        project,
        namespace,
        all,
        queued: queued_only,
    } = args;
    // An id given twice is one run: reported once, where it first appears.
    let mut seen = HashSet::new();
    runs.retain(|id| seen.insert(*id));
    let state = ctx.state(IfInvalid::Warn)?;
    if runs.len() == 1 && !queued_only {
        return cancel_one(&state, runs[0]);
    }
    if !runs.is_empty() {
        return cancel_ids(&state, &runs, queued_only);
    }
    let (selection, what) = match (project, namespace, all) {
        (Some(p), _, _) => (CancelSelection::Project(p.clone()), Some(("project", p))),
        (None, Some(n), _) => (
            CancelSelection::Namespace(n.clone()),
            Some(("namespace", n)),
        ),
        _ => (CancelSelection::All, None),
    };
    cancel_selected(ctx, &state, &selection, what, queued_only)
}

/// `fleet cancel RUN`.
fn cancel_one(state: &StateDir, run: RunId) -> Result<()> {
    let Some(store) = ctx::open_existing_to_write(state)? else {
        return Err(Failure::unknown_run(run));
    };
    let outcome = store
        .request_cancel(run, REASON, store::now_ms())
        .map_err(|e| match e {
            StoreError::UnknownRun(_) => Failure::unknown_run(run),
            other => Failure::action(format!("run {run}: the cancel was not written: {other}")),
        })?;
    match outcome {
        CancelOutcome::Cancelled => {
            // The nudge goes first: the cancel is done whether or not anyone reads the answer.
            ctx::nudge(state);
            console::println(format_args!("run {run} cancelled"))
        }
        CancelOutcome::Requested => {
            if ctx::nudge(state) {
                console::println(format_args!("run {run}: {REQUESTED}"))
            } else {
                console::println(format_args!(
                    "run {run}: cancel requested; no daemon is running, it is stopped when one starts"
                ))
            }
        }
        CancelOutcome::AlreadyFinished(status) => Err(Failure::action(format!(
            "run {run} already ended: {status}"
        ))),
    }
}

/// The line a cancel of several runs prints for one it reached: cancelled at once (it was
/// queued), or its cancel requested (it is active).
fn reached(id: RunId, project: &str, cancelled: bool) -> String {
    if cancelled {
        format!("run {id} ({project}) cancelled")
    } else {
        format!("run {id} ({project}): {REQUESTED}")
    }
}

/// The line `--queued` prints for an active run it leaves alone.
fn left_alone(id: RunId, project: &str) -> String {
    format!("run {id} ({project}): active, left alone")
}

/// `fleet cancel --project P`, `--namespace N` or `--all`: every run of `selection` not ended
/// yet (`what` names the project or namespace asked for, for the message when nothing matches).
fn cancel_selected(
    ctx: &Ctx,
    state: &StateDir,
    selection: &CancelSelection,
    what: Option<(&str, String)>,
    queued_only: bool,
) -> Result<()> {
    let (done, left) = match ctx::open_existing_to_write(state)? {
        Some(store) => {
            let done = store
                .cancel_selected(selection, queued_only, REASON, store::now_ms())
                .map_err(Failure::action)?;
            // With --queued, the active runs of the selection are named too, as the id form
            // does, so that the operator sees what goes on running.
            let left = if queued_only {
                active_in(&store, selection)?
            } else {
                Vec::new()
            };
            (done, left)
        }
        None => (Vec::new(), Vec::new()),
    };
    if done.is_empty() && left.is_empty() {
        if let Some((kind, name)) = what {
            if !known(ctx, kind, &name) {
                return Err(Failure::input(format!(
                    "unknown {kind} {name:?}: not in {} and no run of it to cancel",
                    ctx.path().display()
                )));
            }
        }
        return console::println("nothing to cancel");
    }
    ctx::nudge(state);
    for c in &done {
        let cancelled = matches!(c.outcome, CancelOutcome::Cancelled);
        console::println(reached(c.run_id, &c.project, cancelled))?;
    }
    for run in &left {
        console::println(left_alone(run.id, &run.project))?;
    }
    Ok(())
}

/// The active runs (starting or running) `selection` covers, oldest first.
///
/// Errors: the database (exit 1).
fn active_in(store: &Store, selection: &CancelSelection) -> Result<Vec<store::Run>> {
    let (project, namespace) = match selection {
        CancelSelection::Project(p) => (Some(p.clone()), None),
        CancelSelection::Namespace(n) => (None, Some(n.clone())),
        _ => (None, None),
    };
    let mut runs = store
        .list_runs(&store::RunFilter {
            project,
            namespace,
            statuses: vec![store::RunStatus::Starting, store::RunStatus::Running],
            ..store::RunFilter::default()
        })
        .map_err(Failure::action)?;
    runs.reverse();
    Ok(runs)
}

/// Whether the config (when it loads) names a project or namespace `name`.
fn known(ctx: &Ctx, kind: &str, name: &str) -> bool {
    let Some(config) = ctx.config_if_valid() else {
        // No config to compare with (only `--state-dir`): nothing matched, which says enough.
        return true;
    };
    // On a shared database, the names every daemon knows (the published config's); a
    // database that cannot be read leaves the file's.
    let in_force = ctx.in_force().ok();
    let config = in_force.as_ref().map_or(config, |f| &f.config);
    match kind {
        "project" => config.projects.contains_key(name),
        _ => name == config::DEFAULT_NAMESPACE || config.namespaces.contains_key(name),
    }
}

/// `fleet cancel RUN RUN…` (or one run with `--queued`).
fn cancel_ids(state: &StateDir, runs: &[RunId], queued_only: bool) -> Result<()> {
    let Some(store) = ctx::open_existing_to_write(state)? else {
        return Err(Failure::unknown_run(runs[0]));
    };
    // Every id is checked before anything is cancelled: a typo must not leave half a job done.
    let mut found = Vec::with_capacity(runs.len());
    for &id in runs {
        found.push(
            store
                .get_run(id)
                .map_err(|e| Failure::run_not_read(id, e))?,
        );
    }
    let mut ended = Vec::new();
    let mut lines = Vec::new();
    let now = store::now_ms();
    for run in found {
        let id = run.id;
        if queued_only && run.status.is_active() {
            lines.push(left_alone(id, &run.project));
            continue;
        }
        let outcome = if queued_only {
            // Only a run still queued at the write is cancelled: one claimed meanwhile is left
            // alone, as asked.
            match store
                .cancel_queued_runs(&[id], REASON, now)
                .map_err(Failure::action)?
                .len()
            {
                0 => {
                    let status = store.get_run(id).map_err(Failure::action)?.status;
                    if status.is_terminal() {
                        CancelOutcome::AlreadyFinished(status)
                    } else {
                        lines.push(left_alone(id, &run.project));
                        continue;
                    }
                }
                _ => CancelOutcome::Cancelled,
            }
        } else {
            store
                .request_cancel(id, REASON, now)
                .map_err(Failure::action)?
        };
        match outcome {
            CancelOutcome::AlreadyFinished(status) => ended.push(format!("{id} ({status})")),
            outcome => lines.push(reached(
                id,
                &run.project,
                matches!(outcome, CancelOutcome::Cancelled),
            )),
        }
    }
    ctx::nudge(state);
    for line in lines {
        console::println(line)?;
    }
    if ended.is_empty() {
        Ok(())
    } else {
        Err(Failure::action(format!(
            "already ended, nothing done: run {}",
            ended.join(", run ")
        )))
    }
}
