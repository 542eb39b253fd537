//! `fleet rerun RUN`: queues a new run of a run's project with its arguments, variables and
//! priority, and prints its id.

use store::{NewRun, RunId, Trigger};
use supervisor::statedir::StateDir;

use crate::ctx::{self, Ctx, InForce};
use crate::failure::{Failure, Result};
use crate::queue;

/// What `fleet rerun` was asked.
#[derive(clap::Args, Debug)]
pub struct RerunArgs {
    /// The run to repeat.
    pub run: RunId,
}

/// `fleet rerun RUN`: a new queued run of the same project with the same arguments and
/// environment, trigger `rerun`, linked to `run`; prints its id. A rerun of a failure hook's run
/// keeps its `hook_of` (the failed run it reports).
///
/// Errors: unknown run id, its project no longer in the config, or the run has arguments or
/// environment and its project no longer says `accept_args = true` (exit 2); the database
/// (exit 1).
pub fn rerun(ctx: &Ctx, args: &RerunArgs) -> Result<()> {
    let run = args.run;
    let Some(store) = ctx::open_existing_to_write(&StateDir::of(ctx.config()?))? else {
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
    queue::add(
        &store,
        &config,
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
    )?;
    Ok(())
}
