//! The EVAL's database half, on a blocking thread: write the transitions the reap decided,
//! fire due schedule occurrences, list the queued runs of projects the config does not know,
//! pack the merged running set against the queue heads ([`eval_until_claim`]), then claim the
//! picks ([`claim_packed`]). [`eval_blocking`] is the two back to back, as the daemon's EVAL
//! ([`super::eval`]) and the EVAL-cost bench run them; the simulator (`crates/sim`) calls the
//! halves apart, so that other hosts' steps come between a packing and its claim.
//!
//! A packer must never see the slot pool alone — only its merge with the database's running
//! set — and nothing here may start a shim: the caller starts the shims of the claims, once
//! they are committed.

use std::collections::{BTreeMap, BTreeSet};

use config::Config;
use packer::{merge, packer_for, RunningSet};
use store::{
    Applied, Change, ClaimRequest, Millis, Run, RunFilter, RunId, RunRows, RunStatus, Store,
    StoreError, Transition, UnreadableRun,
};

use super::heads::{candidates, claim_requests, more_heads};
use super::refused::apply_each;
use super::state::refused::ClaimBackoff;

/// What the blocking half of an EVAL hands back.
#[derive(Default)]
pub struct EvalOutcome {
    /// Transitions written, by run.
    pub applied: Vec<(RunId, Applied)>,
    /// Runs claimed (status `starting`, committed): the caller must start a shim for each.
    pub claimed: Vec<Run>,
    /// The DB running set after the claims.
    pub db_active: Vec<Run>,
    /// The active rows another program left unreadable: their seats were counted, nothing
    /// else about them decided (the caller reports them). `None` when this EVAL stopped before
    /// it read the active rows.
    pub unreadable_active: Option<Vec<UnreadableRun>>,
    /// The earliest not-before of a delayed queued run (milliseconds since the epoch, UTC).
    pub next_not_before: Option<Millis>,
    /// The earliest next schedule occurrence (milliseconds since the epoch, UTC).
    pub next_occurrence: Option<Millis>,
    /// The error that stopped the EVAL, with the transitions still to be written.
    pub failed: Option<(StoreError, Vec<Transition>)>,
    /// Queued runs of projects the config does not know, with their project: ended only once
    /// the file confirms the projects are gone (they may be newer than the config).
    pub unknown_queued: Vec<(RunId, String)>,
    /// Transitions the database refused even alone (see `daemon/refused.rs`): unwritten, tried again
    /// later, after a growing wait; the EVAL went on without them.
    pub refused: Vec<Transition>,
    /// How many claims of this EVAL the database refused (their runs now held back): the next
    /// EVAL comes at once, so that the runs behind them in their projects take their place.
    pub claims_refused: usize,
    /// The failed runs the claimed failure hooks' runs report, by id, read after the claim:
    /// their fields become the hook's `FLEET_FAILED_*` variables.
    pub failed_runs: BTreeMap<RunId, Run>,
}

/// Which of its config-dependent steps an EVAL may take (see [`eval_blocking`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvalGates {
    /// List the queued runs of every project, not only the queue heads, for projects missing
    /// from the config (after startup and each config change).
    pub sweep_removed: bool,
    /// Fire due schedule occurrences. False while the config file holds an edit that has not
    /// settled: an occurrence is fired or skipped under the settings the file gives.
    pub fire_schedules: bool,
    /// Claim runs. False while a shim spawn that failed for lack of a resource holds claims
    /// back: the queue waits rather than spinning through claims that cannot start.
    pub claim: bool,
    /// On a shared database, the published config version `config` is (the claims carry it,
    /// and claim nothing once another version is published); `None` on SQLite.
    pub config_version: Option<i64>,
}

/// The blocking half of an EVAL: write the reaped transitions (`batch`), fire due schedule
/// occurrences (when `gates.fire_schedules`), list the queued runs of projects missing from
/// `config` (those of every queued project when `gates.sweep_removed`, else the queue heads'),
/// read the DB running set, pack `merge(live, DB running set)` against the queue heads, and
/// claim the picks (committed before it returns). `live` is the slot pool's running set; `now`
/// is milliseconds since the epoch, UTC. It ends nothing for being unknown to `config`: that is
/// for the caller, once the file confirms it ([`EvalOutcome::unknown_queued`]).
///
/// It is [`eval_until_claim`] then [`claim_packed`], back to back: the simulator calls the two
/// halves apart, so that other hosts' steps come between a host's packing and its claim, as
/// they may on a shared database.
///
/// Blocks on SQLite: call it on a blocking thread. Public so that the EVAL-cost bench
/// (`benches/eval.rs`) measures this very code. Never returns an error: a store error stops it
/// and is handed back in [`EvalOutcome::failed`], with what is still unwritten — except one
/// project's own failure to fire its schedule, which skips that project for a while
/// (`fire_backoff`, kept by the caller across EVALs; see [`crate::schedule::fire_due_with`]).
/// A claim the database refuses leaves its run queued and holds it out of the packing for a
/// growing wait (`claim_backoff`, also kept by the caller; see [`ClaimBackoff`]).
#[allow(clippy::too_many_arguments)]
pub fn eval_blocking(
    store: &Store,
    epoch: i64,
    config: &Config,
    batch: Vec<Transition>,
    live: RunningSet,
    gates: EvalGates,
    fire_backoff: &mut crate::schedule::FireBackoff,
    claim_backoff: &mut ClaimBackoff,
    now: Millis,
) -> EvalOutcome {
    let (mut out, packed) = eval_until_claim(
        store,
        epoch,
        config,
        batch,
        live,
        gates,
        fire_backoff,
        claim_backoff,
        now,
    );
    claim_packed(store, epoch, &packed, claim_backoff, now, &mut out);
    out
}

/// The first half of [`eval_blocking`]: everything up to the claim (write, fire, list, pack),
/// with the claim requests of the picks; none when the EVAL failed, the claim is gated off, or
/// a seat cannot be counted.
#[allow(clippy::too_many_arguments)]
pub fn eval_until_claim(
    store: &Store,
    epoch: i64,
    config: &Config,
    batch: Vec<Transition>,
    mut live: RunningSet,
    gates: EvalGates,
    fire_backoff: &mut crate::schedule::FireBackoff,
    claim_backoff: &mut ClaimBackoff,
    now: Millis,
) -> (EvalOutcome, Vec<ClaimRequest>) {
    let mut out = EvalOutcome::default();
    if !batch.is_empty() {
        let hooks = config.failure_hooks();
        let ((written, applied), failed) = match store.apply_with_hooks(epoch, &batch, &hooks, now)
        {
            Ok(applied) => ((batch, applied), None),
            Err(e) if e.is_refused_row() => {
                apply_each(store, epoch, batch, &hooks, now, &mut out.refused)
            }
            Err(e) => ((Vec::new(), Vec::new()), Some((e, batch))),
        };
        live = without_ended(live, &written, &applied);
        // What was written is reported even when the rest failed: each transition committed
        // on its own must have its slot dropped, or the pool would hold the seat of a run the
        // database has ended.
        out.applied = written.iter().map(|t| t.run_id).zip(applied).collect();
        if let Some(failed) = failed {
            out.failed = Some(failed);
            return (out, Vec::new());
        }
    }
    match pack(
        store,
        epoch,
        config,
        &live,
        gates,
        (fire_backoff, claim_backoff),
        now,
        &mut out,
    ) {
        Ok(requests) => (out, requests),
        Err(e) => {
            out.failed = Some((e, Vec::new()));
            (out, Vec::new())
        }
    }
}

/// The second half of [`eval_blocking`]: claims `requests` (committed before it returns), holds
/// back the runs whose claim the database refused (`claim_backoff`), and reads the failed runs
/// the claimed failure hooks report. Nothing when `out` already failed.
pub fn claim_packed(
    store: &Store,
    epoch: i64,
    requests: &[ClaimRequest],
    claim_backoff: &mut ClaimBackoff,
    now: Millis,
    out: &mut EvalOutcome,
) {
    if out.failed.is_some() || requests.is_empty() {
        return;
    }
    let mut refused = Vec::new();
    let claimed = match store.claim_noting_refusals(epoch, requests, now, &mut refused) {
        Ok(claimed) => claimed,
        Err(e) => {
            out.failed = Some((e, Vec::new()));
            return;
        }
    };
    out.claims_refused = refused.len();
    for (r, wait) in claim_backoff.settle(refused, now) {
        tracing::warn!(
            run = r.run_id,
            reason = %r.reason,
            retry_in = %humantime::format_duration(wait),
            "claim refused by the database (a constraint or a trigger); the run stays queued, and is not asked for again before retry_in"
        );
    }
    for c in &claimed {
        out.db_active.push(c.run.clone());
    }
    out.claimed = claimed.into_iter().map(|c| c.run).collect();
    // The claims are committed: a read that fails here must not stop their spawn, so a
    // hook whose failed run cannot be read is started with what its own row says.
    for hook_of in out.claimed.iter().filter_map(|r| r.hook_of) {
        match store.get_run(hook_of) {
            Ok(failed) => {
                out.failed_runs.insert(hook_of, failed);
            }
            Err(e) => {
                tracing::warn!(run = hook_of, error = %e, "cannot read the failed run a hook reports");
            }
        }
    }
}

/// The pool's running set without the runs a written transition took out of the database's
/// (gone from the one, gone from the other), nor those whose end the database skipped: it
/// already holds them past it (ended by a `fleet hosts forget`, say, or under a newer claim,
/// or queued again by another writer), and the caller drops their slots after this EVAL. A
/// skipped run still active there is counted all the same, through the database's running set
/// this EVAL reads next; left in the pool's, a run the database had already ended would hold
/// its seat through this EVAL, and nothing would wake another one to use it. A skipped start
/// report stays: its shim and command are alive, and must count whatever the row says.
fn without_ended(live: RunningSet, batch: &[Transition], applied: &[Applied]) -> RunningSet {
    let mut live = live;
    for (t, a) in batch.iter().zip(applied) {
        let gone = match a {
            Applied::Done { status, .. } => !status.is_active(),
            Applied::Skipped(_) => !matches!(t.change, Change::Running { .. }),
        };
        if gone {
            live = live
                .iter()
                .filter(|r| r.run_id != t.run_id)
                .cloned()
                .collect();
        }
    }
    live
}

/// Fire → list unknown → pack, filling `out` as it goes, and the claim requests of the picks
/// (see [`eval_until_claim`]).
#[allow(clippy::too_many_arguments)]
fn pack(
    store: &Store,
    epoch: i64,
    config: &Config,
    live: &RunningSet,
    gates: EvalGates,
    (fire_backoff, claim_backoff): (&mut crate::schedule::FireBackoff, &mut ClaimBackoff),
    now: Millis,
    out: &mut EvalOutcome,
) -> Result<Vec<ClaimRequest>, StoreError> {
    // Delays set by a clock that has since stepped back are counted again from now.
    crate::clock::rebase_delays(store, epoch, now)?;
    // Fire due schedule occurrences before packing, so a fired run can start in this EVAL.
    if gates.fire_schedules {
        out.next_occurrence =
            crate::schedule::fire_due_with(store, epoch, config, now, fire_backoff)?;
    }
    // Queued runs of projects missing from the config cannot start under it. Every queued
    // project is looked at after a config change (and at startup), when projects may have gone;
    // between changes, a queue head naming an unknown project (queued by a command that read
    // another, maybe newer, file) is caught below.
    let mut unknown: BTreeSet<String> = BTreeSet::new();
    if gates.sweep_removed {
        unknown.extend(
            store
                .queued_projects()?
                .into_iter()
                .filter(|p| !config.projects.contains_key(p)),
        );
    }
    let RunRows {
        runs: db,
        unreadable,
    } = store.active_rows()?;
    // A row another program left unreadable counts its seat like any other: what it holds
    // besides cannot be read, but its project, namespace and host can.
    let persisted: RunningSet = db
        .iter()
        .map(|r| (r.id, &r.project, &r.namespace, &r.host))
        .chain(
            unreadable
                .iter()
                .map(|r| (r.id, &r.project, &r.namespace, &r.host)),
        )
        .map(|(run_id, project, namespace, host)| packer::ActiveRun {
            run_id,
            project: project.clone(),
            namespace: namespace.clone(),
            // `None` is this host: its own capacity counts only those; the global and namespace
            // caps count every host's.
            host: host.clone().filter(|h| *h != config.host),
        })
        .collect();
    // A row whose project or namespace is not even text could count against any cap: nothing
    // is claimed while it is there, or a cap could be exceeded (no name compares equal to it,
    // in the packing nor in the claim's own count).
    let seats_unknown = unreadable.iter().any(|r| !r.seat_known);
    out.unreadable_active = Some(unreadable);
    // The packers see the merge, never the pool alone: after a restart the pool is empty while
    // the database still lists what is in flight.
    let running = merge(live, &persisted);
    let caps = config.caps();
    let mut heads = store.queue_heads(now)?;
    unknown.extend(
        heads
            .iter()
            .filter(|h| !config.projects.contains_key(&h.project))
            .map(|h| h.project.clone()),
    );
    for project in unknown {
        // A row of it that cannot be read stays queued, never claimed (its project is none of
        // the config's), and must not stop the EVAL.
        let queued = store
            .list_rows(&RunFilter {
                project: Some(project),
                status: Some(RunStatus::Queued),
                limit: None,
                ..RunFilter::default()
            })?
            .runs;
        out.unknown_queued
            .extend(queued.into_iter().map(|r| (r.id, r.project)));
    }
    // A paused project or namespace starts nothing: its heads are left out here, so they take
    // no place in the packing, and the claim checks again in its transaction.
    let pauses = store.paused()?;
    if !pauses.is_empty() {
        heads.retain(|h| {
            let ns = config
                .projects
                .get(&h.project)
                .map_or(h.namespace.as_str(), |p| p.namespace.as_str());
            pauses.holding(&h.project, ns).is_none()
        });
    }
    more_heads(store, config, &running, &mut heads, now)?;
    // A run whose claim the database refused a moment ago waits out its backoff: asked for
    // at once it would be refused again, and take a seat another run could use.
    if !claim_backoff.is_empty() {
        super::refused::behind_held(store, config, &running, &mut heads, claim_backoff, now)?;
    }
    let candidates = candidates(heads, config);
    let picks = packer_for(&caps).pack(&caps, &running, &candidates);
    out.db_active = db;
    // Read before the claim: once runs are claimed, nothing may stop them being spawned.
    out.next_not_before = store.next_not_before(now)?;
    if gates.claim && !seats_unknown && !picks.is_empty() {
        return Ok(claim_requests(&picks, &caps, config, gates.config_version));
    }
    Ok(Vec::new())
}

#[cfg(test)]
mod tests;
