//! The invariants, checked against the simulated world's truth ([`crate::world::Truth`]) and
//! the store's rows, never against what fleet says of itself.

use std::collections::{BTreeMap, BTreeSet};

use config::Config;
use store::{Run, RunFilter, RunId, RunStatus};

use crate::host::Evaluated;
use crate::world::{End, Phase};
use crate::{Failure, Sim};

/// What the checks remember between steps.
#[derive(Default)]
pub struct Checks {
    /// How many checks were made.
    pub made: u64,
    /// The first terminal status (and exit code) each ended run was seen with.
    terminal: BTreeMap<RunId, (RunStatus, Option<i32>)>,
    /// Queued runs whose cancel the store accepted: they must never start.
    pub cancelled_queued: BTreeSet<RunId>,
    /// Runs whose cancel the store accepted (queued or active): no retry of them may start.
    pub cancel_accepted: BTreeSet<RunId>,
}

/// After a command started (the shim of claim `token` of `run` wrote `started`): it had never
/// started before, and no accepted cancel had ended it while queued.
pub(crate) fn after_start(sim: &mut Sim, run: RunId, token: u64) -> Result<(), Failure> {
    sim.checks.made += 2;
    let starters = sim
        .world
        .truth
        .commands
        .get(&run)
        .map(|c| c.started_by.clone())
        .unwrap_or_default();
    if starters.len() > 1 {
        return Err(sim.violation(format!(
            "run {run}'s command started twice (claims {starters:?}; the last, {token}, now)"
        )));
    }
    if sim.checks.cancelled_queued.contains(&run) {
        return Err(sim.violation(format!(
            "run {run} started although its cancel was accepted while it was queued"
        )));
    }
    // A cancel is final: no retry of a run whose cancel was accepted runs.
    let row = get(sim, run)?;
    if let Some(of) = row.retry_of {
        if sim.checks.cancel_accepted.contains(&of) {
            return Err(sim.violation(format!(
                "run {run}, a retry of run {of}, started although run {of}'s cancel was accepted"
            )));
        }
    }
    Ok(())
}

/// After an EVAL: every claim it made fit the caps of the config it ran with, counted on the
/// world (the commands running, and the shims about to start the command of a claim the
/// database still holds); every run it ended says how its command really ended, and no run
/// that had ended changed its end.
pub(crate) fn after_eval(
    sim: &mut Sim,
    config: &Config,
    evaluated: &Evaluated,
) -> Result<(), Failure> {
    if !evaluated.claimed.is_empty() {
        caps(sim, config, &evaluated.claimed)?;
    }
    for run in &evaluated.ended {
        ended(sim, run)?;
    }
    Ok(())
}

/// The seats the world's commands take, by the run's row (project, and the namespace it was
/// claimed under): the commands running, and the shims that have not started theirs yet for
/// the claim the database holds now.
fn occupied(sim: &Sim) -> Result<Vec<Run>, Failure> {
    let mut runs: BTreeSet<RunId> = sim.world.truth.running().collect();
    let spawned: Vec<(RunId, u64)> = sim
        .world
        .shims
        .values()
        .filter(|s| s.phase == Phase::Spawned)
        .map(|s| (s.run, s.token))
        .collect();
    let mut rows = Vec::new();
    for (run, token) in spawned {
        let row = get(sim, run)?;
        if row.status.is_active() && row.claim_token == token && runs.insert(run) {
            rows.push(row);
        }
    }
    for run in sim.world.truth.running().collect::<Vec<_>>() {
        rows.push(get(sim, run)?);
    }
    Ok(rows)
}

fn get(sim: &Sim, run: RunId) -> Result<Run, Failure> {
    sim.store
        .get_run(run)
        .map_err(|e| sim.violation(format!("run {run} could not be read: {e}")))
}

fn caps(sim: &mut Sim, config: &Config, claimed: &[Run]) -> Result<(), Failure> {
    let occupied = occupied(sim)?;
    sim.checks.made += 3 * claimed.len() as u64;
    let global = occupied.len();
    let describe = |rows: &[&Run]| {
        rows.iter()
            .map(|r| format!("{} ({})", r.id, r.project))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for c in claimed {
        if global > config.max_concurrency {
            let all: Vec<&Run> = occupied.iter().collect();
            return Err(sim.violation(format!(
                "run {} was claimed while {global} commands held seats under a global cap of {}: {}",
                c.id,
                config.max_concurrency,
                describe(&all)
            )));
        }
        if let Some(ns) = config.namespaces.get(&c.namespace) {
            let in_ns: Vec<&Run> = occupied
                .iter()
                .filter(|r| r.namespace == c.namespace)
                .collect();
            if in_ns.len() > ns.max_concurrency {
                return Err(sim.violation(format!(
                    "run {} was claimed in namespace {} while {} commands held its {} seats: {}",
                    c.id,
                    c.namespace,
                    in_ns.len(),
                    ns.max_concurrency,
                    describe(&in_ns)
                )));
            }
        }
        if let Some(p) = config.projects.get(&c.project) {
            let of_project: Vec<&Run> =
                occupied.iter().filter(|r| r.project == c.project).collect();
            if of_project.len() > p.max_parallel as usize {
                return Err(sim.violation(format!(
                    "run {} of {} was claimed while {} of its commands held its max_parallel of {}: {}",
                    c.id,
                    c.project,
                    of_project.len(),
                    p.max_parallel,
                    describe(&of_project)
                )));
            }
        }
    }
    Ok(())
}

/// `run` is terminal in the store: it was not seen with another end before, and its end is
/// its command's.
fn ended(sim: &mut Sim, run: &Run) -> Result<(), Failure> {
    sim.checks.made += 2;
    let seen = (run.status, run.exit_code);
    match sim.checks.terminal.get(&run.id) {
        Some(first) if *first != seen => {
            return Err(sim.violation(format!(
                "run {} ended twice: first {} (exit code {:?}), now {} (exit code {:?})",
                run.id, first.0, first.1, seen.0, seen.1
            )));
        }
        Some(_) => return Ok(()),
        None => {
            sim.checks.terminal.insert(run.id, seen);
        }
    }
    let Some(command) = sim.world.truth.commands.get(&run.id) else {
        // Never started: it may end cancelled (a cancel while queued), lost or failed, never
        // as if its command had run.
        if run.status == RunStatus::Succeeded {
            return Err(sim.violation(format!(
                "run {} is recorded succeeded but its command never started",
                run.id
            )));
        }
        return Ok(());
    };
    if !command.started_by.contains(&run.claim_token) {
        // Ended under a claim that started nothing: never with an exit status of its own.
        if run.exit_code.is_some() && run.status == RunStatus::Succeeded {
            return Err(sim.violation(format!(
                "run {} is recorded succeeded under claim {}, whose shim started nothing",
                run.id, run.claim_token
            )));
        }
        return Ok(());
    }
    let expected: &[RunStatus] = match (command.ended, command.lost) {
        (Some(End::Exited(0)), _) => &[RunStatus::Succeeded],
        (Some(End::Exited(_)), _) => &[RunStatus::Failed],
        (Some(End::Cancelled), _) => &[RunStatus::Cancelled],
        (None, true) => &[RunStatus::Lost],
        (None, false) => {
            return Err(sim.violation(format!(
                "run {} is recorded {} while its command still runs",
                run.id, run.status
            )))
        }
    };
    let code_ok = match command.ended {
        Some(End::Exited(code)) => run.exit_code == Some(code),
        _ => true,
    };
    if !expected.contains(&run.status) || !code_ok {
        return Err(sim.violation(format!(
            "run {} is recorded {} (exit code {:?}), but its command {}",
            run.id,
            run.status,
            run.exit_code,
            match (command.ended, command.lost) {
                (Some(End::Exited(c)), _) => format!("exited {c}"),
                (Some(End::Cancelled), _) => "was cancelled".to_string(),
                _ => "died with its shim".to_string(),
            }
        )));
    }
    Ok(())
}

/// At the end: every run ended, each with the end first seen and its command's.
pub(crate) fn all_runs(sim: &mut Sim) -> Result<(), Failure> {
    let runs = sim
        .store
        .list_runs(&RunFilter::default())
        .map_err(|e| sim.violation(format!("the runs could not be listed: {e}")))?;
    for run in &runs {
        if !run.status.is_terminal() {
            return Err(sim.violation(format!(
                "run {} is still {} after the drain",
                run.id, run.status
            )));
        }
        ended(sim, run)?;
        if sim.checks.cancelled_queued.contains(&run.id) && run.status != RunStatus::Cancelled {
            return Err(sim.violation(format!(
                "run {} was cancelled while queued, and is now {}",
                run.id, run.status
            )));
        }
    }
    Ok(())
}

/// At the end: `fleet check`'s audit of the store and the run files finds nothing.
pub(crate) fn audit(sim: &mut Sim) -> Result<(), Failure> {
    sim.checks.made += 1;
    let state = supervisor::statedir::StateDir::of(&sim.config);
    let report = supervisor::audit::audit(&state, &sim.store, sim.now, Some(&sim.config))
        .map_err(|e| sim.violation(format!("the audit could not run: {e}")))?;
    if !report.ok() {
        let found: Vec<String> = report
            .violations
            .iter()
            .take(5)
            .map(|v| v.message.clone())
            .collect();
        return Err(sim.violation(format!(
            "`fleet check` finds {} violation(s): {}",
            report.violations.len(),
            found.join("; ")
        )));
    }
    Ok(())
}
