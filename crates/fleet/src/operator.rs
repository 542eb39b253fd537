//! The operator's everyday verbs over runs: `enqueue` (with a run's own arguments and
//! environment, and `--wait`), `wait`, `rerun` and `cancel` (one run, several, or a whole
//! project, namespace or install).
//!
//! Writes go to the database (which works whether or not a daemon runs), then a nudge tells
//! the daemon to look now; a missing daemon is never an error here.

use std::time::Duration;

use store::{NewRun, RunId, Trigger};
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
