//! The operator's everyday verbs over runs: `enqueue` (with a run's own arguments and
//! environment, and `--wait`), `wait`, `rerun` and `cancel` (one run, several, or a whole
//! project, namespace or install).
//!
//! Writes go to the database (which works whether or not a daemon runs), then a nudge tells
//! the daemon to look now; a missing daemon is never an error here.

use std::time::Duration;

use store::{CancelOutcome, CancelSelection, NewRun, RunId, Trigger};
use supervisor::statedir::StateDir;

use crate::ctx::{self, Ctx, IfInvalid, InForce};
use crate::failure::{Failure, Result};
use crate::{console, run_args, wait};

// The argument structs below are flattened into `cli::Command`'s variants, whose doc comments
// are the commands' help; each field's doc comment is its option's help.

/// What `fleet enqueue` was asked.
#[derive(clap::Args, Debug)]
pub struct EnqueueArgs {
    /// The project, as named in fleet.toml.
    pub project: String,
    /// Higher runs first; equal priorities run in enqueue order.
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    pub priority: i64,
    /// A variable for this run alone, on top of the project's env (repeatable; needs
    /// accept_args = true).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Block until the run, with its retries, has ended; exit as its command did.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this long (exit 124), leaving the run as it is.
    #[arg(long, requires = "wait", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Arguments appended to the project's command for this run (needs accept_args = true).
    #[arg(last = true, value_name = "ARG")]
    pub args: Vec<String>,
}

/// What `fleet wait` was asked.
#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// Run ids.
    #[arg(value_name = "RUN", required = true)]
    pub runs: Vec<RunId>,
    /// Give up after this long (exit 124), leaving the runs as they are.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
}

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

/// `fleet enqueue`: queues a run and prints its id; with `--wait`, then waits for it as
/// [`wait::wait`] does.
///
/// Errors: unknown project, arguments or `--env` for a project without `accept_args`, a bad
/// `--env` (exit 2); the database (exit 1); the wait's own.
pub fn enqueue(ctx: &Ctx, req: &EnqueueArgs) -> Result<()> {
    // On a shared database, the projects every daemon knows, not only this file's.
    let InForce {
        config,
        source,
        store,
    } = ctx.in_force()?;
    let Some(p) = config.projects.get(&req.project) else {
        return Err(Failure::input(format!(
            "unknown project {:?} (not in {source})",
            req.project,
        )));
    };
    let env = req
        .env
        .iter()
        .map(|item| run_args::parse_env(item))
        .collect::<Result<Vec<_>>>()?;
    let env = run_args::dedup_env(env);
    run_args::check_for(p, &source, &req.args, &env)?;
    let store = ctx::store_to_write(store, &config)?;
    let id = store
        .enqueue(
            &NewRun {
                project: req.project.clone(),
                namespace: p.namespace.clone(),
                priority: req.priority,
                trigger: Trigger::Manual,
                args: req.args.clone(),
                env,
                ..Default::default()
            },
            store::now_ms(),
        )
        .map_err(Failure::action)?;
    // The run is queued whether or not anyone reads its id: the nudge goes out either way.
    let printed = console::println(id);
    // A hint only: without a daemon the run waits in the queue for one.
    ctx::nudge(&StateDir::of(&config));
    printed?;
    if req.wait {
        wait::wait(&store, &[id], req.timeout)
    } else {
        Ok(())
    }
}

/// `fleet wait RUN…`.
///
/// Errors: see [`wait::wait`]; no database at all is an unknown id (exit 2).
pub fn wait(ctx: &Ctx, req: &WaitArgs) -> Result<()> {
    let state = ctx.state(IfInvalid::Refuse)?;
    let Some(store) = ctx::open_existing(&state)? else {
        return Err(Failure::unknown_run(req.runs[0]));
    };
    wait::wait(&store, &req.runs, req.timeout)
}

/// `fleet rerun RUN`: a new queued run of the same project with the same arguments and
/// environment, trigger `rerun`, linked to `run`; prints its id. A rerun of a failure hook's run
/// keeps its `hook_of` (the failed run it reports).
///
/// Errors: unknown run id, its project no longer in the config, or the run has arguments or
/// environment and its project no longer says `accept_args = true` (exit 2); the database
/// (exit 1).
pub fn rerun(ctx: &Ctx, run: RunId) -> Result<()> {
    let Some(store) = ctx::open_existing(&StateDir::of(ctx.config()?))? else {
        return Err(Failure::unknown_run(run));
    };
    let original = store
        .get_run(run)
        .map_err(|e| Failure::run_not_read(run, e))?;
    let InForce { config, source, .. } = ctx.in_force()?;
    let Some(p) = config.projects.get(&original.project) else {
        return Err(Failure::input(format!(
            "run {run}: project {:?} is no longer in {source}",
            original.project,
        )));
    };
    // The project may have stopped accepting arguments since: repeating them would bypass the
    // refusal `fleet enqueue` makes.
    if !p.accept_args && (!original.args.is_empty() || !original.env.is_empty()) {
        return Err(Failure::input(format!(
            "run {run} has arguments or --env, but project {:?} no longer accepts them (accept_args = false in {source})",
            original.project,
        )));
    }
    let id = store
        .enqueue(
            &NewRun {
                project: original.project.clone(),
                namespace: p.namespace.clone(),
                priority: original.priority,
                trigger: Trigger::Rerun,
                args: original.args,
                env: original.env,
                rerun_of: Some(run),
                // A rerun of a failure hook's run still reports the failed run: it gets its
                // variables, and its own failure queues no hook (a hook never triggers one).
                hook_of: original.hook_of,
                ..Default::default()
            },
            store::now_ms(),
        )
        .map_err(Failure::action)?;
    let printed = console::println(id);
    ctx::nudge(&StateDir::of(&config));
    printed
}

/// `fleet cancel`: one id keeps its historical answer ([`crate::commands::cancel`]); several
/// ids, or a selection, print one line per run reached.
///
/// Errors: an unknown id (exit 2, before anything is cancelled); a project or namespace the
/// config does not name and no run carries (exit 2); a run given by id that had already ended
/// (exit 1, after the others were cancelled); the database (exit 1).
pub fn cancel(ctx: &Ctx, req: CancelArgs) -> Result<()> {
    let CancelArgs {
        runs,
        project,
        namespace,
        all,
        queued: queued_only,
    } = req;
    // An id given twice is one run: reported once, where it first appears.
    let mut runs = runs;
    let mut seen = std::collections::HashSet::new();
    runs.retain(|id| seen.insert(*id));
    if runs.len() == 1 && !queued_only {
        return crate::commands::cancel(ctx, runs[0]);
    }
    if !runs.is_empty() {
        return cancel_ids(ctx, &runs, queued_only);
    }
    let (selection, what) = match (project, namespace, all) {
        (Some(p), _, _) => (CancelSelection::Project(p.clone()), Some(("project", p))),
        (None, Some(n), _) => (
            CancelSelection::Namespace(n.clone()),
            Some(("namespace", n)),
        ),
        _ => (CancelSelection::All, None),
    };
    let state = ctx.state(IfInvalid::Refuse)?;
    let (done, left) = match ctx::open_existing(&state)? {
        Some(store) => {
            let done = store
                .cancel_selected(
                    &selection,
                    queued_only,
                    "cancelled by operator",
                    store::now_ms(),
                )
                .map_err(Failure::action)?;
            // With --queued, the active runs of the selection are named too, as the id form
            // does, so that the operator sees what goes on running.
            let left = if queued_only {
                active_in(&store, &selection)?
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
    ctx::nudge(&state);
    for c in &done {
        match c.outcome {
            CancelOutcome::Cancelled => {
                console::println(format_args!("run {} ({}) cancelled", c.run_id, c.project))?
            }
            _ => console::println(format_args!(
                "run {} ({}): cancel requested; it ends `cancelled` once its process is gone",
                c.run_id, c.project
            ))?,
        }
    }
    for run in &left {
        console::println(format_args!(
            "run {} ({}): active, left alone",
            run.id, run.project
        ))?;
    }
    Ok(())
}

/// The active runs (starting or running) `selection` covers, oldest first.
///
/// Errors: the database (exit 1).
fn active_in(store: &store::Store, selection: &CancelSelection) -> Result<Vec<store::Run>> {
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
        _ => name == supervisor::config::DEFAULT_NAMESPACE || config.namespaces.contains_key(name),
    }
}

/// `fleet cancel RUN RUN…` (or one run with `--queued`).
fn cancel_ids(ctx: &Ctx, runs: &[RunId], queued_only: bool) -> Result<()> {
    let state = ctx.state(IfInvalid::Refuse)?;
    let Some(store) = ctx::open_existing(&state)? else {
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
            lines.push(format!("run {id} ({}): active, left alone", run.project));
            continue;
        }
        let outcome = if queued_only {
            // Only a run still queued at the write is cancelled: one claimed meanwhile is left
            // alone, as asked.
            match store
                .cancel_queued_runs(&[id], "cancelled by operator", now)
                .map_err(Failure::action)?
                .len()
            {
                0 => {
                    let status = store.get_run(id).map_err(Failure::action)?.status;
                    if status.is_terminal() {
                        CancelOutcome::AlreadyFinished(status)
                    } else {
                        lines.push(format!("run {id} ({}): active, left alone", run.project));
                        continue;
                    }
                }
                _ => CancelOutcome::Cancelled,
            }
        } else {
            store
                .request_cancel(id, "cancelled by operator", now)
                .map_err(Failure::action)?
        };
        match outcome {
            CancelOutcome::Cancelled => lines.push(format!("run {id} ({}) cancelled", run.project)),
            CancelOutcome::Requested => lines.push(format!(
                "run {id} ({}): cancel requested; it ends `cancelled` once its process is gone",
                run.project
            )),
            CancelOutcome::AlreadyFinished(status) => ended.push(format!("{id} ({status})")),
        }
    }
    ctx::nudge(&state);
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
