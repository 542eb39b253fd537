//! The invariants, checked against the simulated world's truth ([`crate::world::Truth`], one
//! per host) and the store's rows, never against what fleet says of itself. With many hosts
//! they hold fleet-wide: a command started on two hosts is started twice, and the caps are
//! counted on every host's commands.

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
    /// Runs whose row another program ended while their command ran: their status is that
    /// program's, not their command's.
    pub ended_by_hand: BTreeSet<RunId>,
}

/// After a command started (the shim of claim `token` of `run` wrote `started`): it had never
/// started before, and no accepted cancel had ended it while queued.
pub(crate) fn after_start(sim: &mut Sim, h: usize, run: RunId, token: u64) -> Result<(), Failure> {
    sim.checks.made += 2;
    let starters: Vec<(String, u64)> = sim
        .hosts
        .iter()
        .flat_map(|host| {
            host.world
                .truth
                .commands
                .get(&run)
                .into_iter()
                .flat_map(|c| c.started_by.iter().map(|t| (host.name.clone(), *t)))
        })
        .collect();
    if starters.len() > 1 {
        return Err(sim.violation(format!(
            "run {run}'s command started twice (hosts and claims {starters:?}; the last, {token}, now on {})",
            sim.hosts[h].name
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

/// After an EVAL of host `h`: every claim it made fit the caps of the config it ran with and
/// the project's hosts, counted on the world (the commands running, and the shims about to
/// start the command of a claim the database still holds, on every host); every run it ended
/// says how its command really ended, and when, on the database's clock; and no run that had
/// ended changed its end.
pub(crate) fn after_eval(
    sim: &mut Sim,
    h: usize,
    config: &Config,
    evaluated: &Evaluated,
) -> Result<(), Failure> {
    if !evaluated.claimed.is_empty() {
        caps(sim, h, config, &evaluated.claimed)?;
    }
    for run in &evaluated.ended {
        ended(sim, run)?;
        if sim.shared() {
            times(sim, h, run)?;
        }
    }
    Ok(())
}

/// The seats the world's commands take, by host and the run's row (project, and the namespace
/// it was claimed under): the commands running, and the shims that have not started theirs
/// yet for the claim the database holds now.
fn occupied(sim: &Sim) -> Result<Vec<(usize, Run)>, Failure> {
    let mut rows = Vec::new();
    for (h, host) in sim.hosts.iter().enumerate() {
        let mut runs: BTreeSet<RunId> = host.world.truth.running().collect();
        let spawned: Vec<(RunId, u64)> = host
            .world
            .shims
            .values()
            .filter(|s| s.phase == Phase::Spawned)
            .map(|s| (s.run, s.token))
            .collect();
        for (run, token) in spawned {
            let row = get(sim, run)?;
            if row.status.is_active() && row.claim_token == token && runs.insert(run) {
                rows.push((h, row));
            }
        }
        for run in host.world.truth.running() {
            rows.push((h, get(sim, run)?));
        }
    }
    Ok(rows)
}

/// The command `run` had on some host, if it started anywhere.
fn command_of(sim: &Sim, run: RunId) -> Option<&crate::world::Command> {
    sim.hosts
        .iter()
        .find_map(|host| host.world.truth.commands.get(&run))
}

fn get(sim: &Sim, run: RunId) -> Result<Run, Failure> {
    sim.store
        .get_run(run)
        .map_err(|e| sim.violation(format!("run {run} could not be read: {e}")))
}

fn caps(sim: &mut Sim, h: usize, config: &Config, claimed: &[Run]) -> Result<(), Failure> {
    let on_hosts = occupied(sim)?;
    let here = sim.hosts[h].name.clone();
    let on_this_host: Vec<&Run> = on_hosts
        .iter()
        .filter(|(at, _)| *at == h)
        .map(|(_, r)| r)
        .collect();
    let occupied: Vec<Run> = on_hosts.iter().map(|(_, r)| r.clone()).collect();
    sim.checks.made += 5 * claimed.len() as u64;
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
        if let Some(cap) = config.hosts.get(&here).map(|h| h.max_concurrency) {
            if on_this_host.len() > cap {
                return Err(sim.violation(format!(
                    "run {} was claimed on host {here} while {} commands held its {cap} seats: {}",
                    c.id,
                    on_this_host.len(),
                    describe(&on_this_host)
                )));
            }
        }
        if let Some(p) = config.projects.get(&c.project) {
            if p.hosts.as_ref().is_some_and(|on| !on.contains(&here)) {
                return Err(sim.violation(format!(
                    "run {} of {} was claimed on host {here}, not one of the project's hosts {:?}",
                    c.id, c.project, p.hosts
                )));
            }
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
    // Its row another program ended; or an operator forgot its host, lost with its machine,
    // and its end was declared without that host's word (what its lost disk says may differ).
    if sim.checks.ended_by_hand.contains(&run.id) || store::ended_by_forget(run) {
        return Ok(());
    }
    let Some(command) = command_of(sim, run.id) else {
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
            "run {} is recorded {} (exit code {:?}, note {:?}), but its command {}",
            run.id,
            run.status,
            run.exit_code,
            run.reason.as_deref().unwrap_or(""),
            match (command.ended, command.lost) {
                (Some(End::Exited(c)), _) => format!("exited {c}"),
                (Some(End::Cancelled), _) => "was cancelled".to_string(),
                _ => "died with its shim".to_string(),
            }
        )));
    }
    Ok(())
}

/// On a shared database, `run`, whose end host `h` wrote, was claimed and ended at instants
/// of the database's clock: its end (taken from the exit record its host's machine wrote, on
/// that machine's clock) is neither before its claim nor after now. Not checked when the
/// host's clock was stepped since the claim: a record written before the step is read by the
/// offset after it (the daemon can only know the offset it last measured).
fn times(sim: &mut Sim, h: usize, run: &Run) -> Result<(), Failure> {
    let (Some(started), Some(finished)) = (run.started_at, run.finished_at) else {
        return Ok(());
    };
    if sim.hosts[h].stepped_at.is_some_and(|at| at >= started) {
        return Ok(());
    }
    sim.checks.made += 1;
    if command_of(sim, run.id).is_none_or(|c| !c.started_by.contains(&run.claim_token)) {
        return Ok(());
    }
    if finished < started || finished > sim.now {
        return Err(sim.violation(format!(
            "run {} ended on host {} (its clock {} ms off the database's) is recorded as ended at {finished}, claimed at {started}, by the database's clock now {}",
            run.id, sim.hosts[h].name, sim.hosts[h].offset, sim.now
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
    occurrences(sim, &runs)?;
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

/// At the end: no schedule occurrence fired twice (two first attempts of one occurrence),
/// nor before its instant by the clock the daemons judge time by.
fn occurrences(sim: &mut Sim, runs: &[Run]) -> Result<(), Failure> {
    let mut fired: BTreeMap<(&str, i64), RunId> = BTreeMap::new();
    for run in runs
        .iter()
        .filter(|r| r.trigger == store::Trigger::Schedule && r.attempt == 1)
    {
        sim.checks.made += 2;
        sim.summary.fired += 1;
        let Some(at) = run.occurrence else {
            return Err(sim.violation(format!(
                "run {} was fired by a schedule but names no occurrence",
                run.id
            )));
        };
        if let Some(first) = fired.insert((run.project.as_str(), at), run.id) {
            return Err(sim.violation(format!(
                "the occurrence {at} of {} fired twice: runs {first} and {}",
                run.project, run.id
            )));
        }
        if run.enqueued_at < at {
            return Err(sim.violation(format!(
                "run {} of the occurrence {at} of {} was queued at {}, before its instant",
                run.id, run.project, run.enqueued_at
            )));
        }
    }
    Ok(())
}

/// At the end: `fleet check`'s audit of the store and host `h`'s run files finds nothing (but
/// of the runs whose row another program ended).
pub(crate) fn audit(sim: &mut Sim, h: usize) -> Result<(), Failure> {
    sim.checks.made += 1;
    let config = sim.hosts[h].config.clone();
    let state = supervisor::statedir::StateDir::of(&config);
    let report = supervisor::audit::audit(&state, &sim.store, sim.now, Some(&config))
        .map_err(|e| sim.violation(format!("the audit could not run: {e}")))?;
    // A run whose row another program ended while its command ran disagrees with its files:
    // the audit is right to say so, and says it of that run alone.
    let violations: Vec<_> = report
        .violations
        .iter()
        .filter(|v| {
            v.run_id
                .is_none_or(|id| !sim.checks.ended_by_hand.contains(&id))
        })
        .collect();
    if !violations.is_empty() {
        let found: Vec<String> = violations
            .iter()
            .take(5)
            .map(|v| v.message.clone())
            .collect();
        return Err(sim.violation(format!(
            "`fleet check` on host {} finds {} violation(s): {}",
            sim.hosts[h].name,
            violations.len(),
            found.join("; ")
        )));
    }
    Ok(())
}
