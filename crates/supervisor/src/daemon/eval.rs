//! The EVAL: reap → fire due schedule occurrences → pack → claim → spawn → cancel. (Recovery
//! and adoption run before the first EVAL and again until they succeed; see
//! [`super::recover`].) What each step does, which run on a blocking thread, and what waits
//! when the database refuses or fails, is the daemon's module doc, "One EVAL" ([`super`]).
//!
//! Decisions and effects are cut where the code allows it:
//! - [`reap`](crate::core::reap) settles the shims that exited and decides their transitions (from
//!   the run files);
//! - [`eval_blocking`] writes them, fires schedules, lists queued runs of projects the config
//!   does not know, packs the merged running set against the queue heads and claims the picks;
//! - [`eval`](super::eval::eval) runs both on a blocking thread, then applies the outcome to the slot pool,
//!   logs each run's claim, start and end, starts the shims of the claims ([`super::spawn`]),
//!   signals cancels ([`super::cancel`]) and hands the listed runs to
//!   [`end_removed`](super::reload), which ends them only once the file confirms their
//!   projects are gone;
//! - [`shim_running`](super::eval::shim_running) and [`shim_exited`](super::eval::shim_exited) take a shim's reports in for the next
//!   EVAL: the loop calls them, and never builds a transition itself.
//!
//! Reaps (whose retries depend on the project's settings) and schedule firing (overlap,
//! timetable, deadline) wait while fleet.toml holds an edit that has not settled yet
//! ([`super::reload::ConfigView::usable`]): they are never decided on a config older than the
//! file.
//!
//! Every database call of an EVAL happens on a blocking thread (`spawn_blocking`), never on the
//! runtime, and its writes are batched: one transaction for all the transitions it reaps, one
//! for all the claims it makes. An EVAL must never start a shim before its claim is committed
//! (a run still `queued` while its shim starts could be handed out twice), and a packer must
//! never see the slot pool alone — only its merge with the DB running set.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use config::Config;
use packer::{merge, packer_for, RunningSet};
use store::{
    now_ms, Applied, Change, ClaimRequest, Millis, Run, RunFilter, RunId, RunRows, RunStatus,
    Store, StoreError, Transition, UnreadableRun,
};
use tokio::time::Instant;

use super::follow::{watch_group, watch_lock};
use super::heads::{candidates, claim_requests, more_heads};
use super::hosts::{follow_published, keep_log_tails};
use super::outage::{database_down, database_reachable, database_unreachable};
use super::reap::end_orphaned;
use super::refused::{apply_each, keep_refused, refused_due, take_due_refused};
use super::reload::{config_view, end_removed, wake_within};
use super::spawn::{spawn, spawn_hold_over, wake_after_spawn_hold};
use super::state::refused::ClaimBackoff;
use super::state::Daemon;
use super::unreadable::{note_unreadable, note_unreadable_rows};
use crate::core::cancel::signal_cancelled;
use crate::core::reap::{reap, SlotView};
use crate::core::slots::{release_ended, shim_done_with};
use crate::retry::RetryPolicy;

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

/// The first wait after an EVAL failed (the database busy, or any other error but an
/// unreachable database); it doubles up to [`EVAL_RETRY_MAX`].
pub(super) const EVAL_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait after failed EVALs.
pub(super) const EVAL_RETRY_MAX: Duration = Duration::from_secs(5);

/// One EVAL. A store error leaves what is still unwritten in [`Supervised::pending`](super::state::Supervised::pending) and sets a
/// backoff; a fenced write (a newer daemon took the state directory over) sets
/// [`Membership::fenced`](super::state::Membership::fenced), and the loop stops.
pub(super) async fn eval(d: &mut Daemon) {
    // On a shared database the config in force is the published one: a newer version is
    // applied before anything is packed with the caps of the old.
    let was_down = database_down(&d.holds);
    follow_published(d).await;
    if !was_down && database_down(&d.holds) {
        // The database was lost right here: the EVAL stops as at any failure, and is tried
        // again after the outage's pause (one that went on would find it back at once, on a
        // connection the pool still had, and the outage would be said over and over).
        return;
    }
    // Before anything is decided on the config: is it what the file says now?
    let view = config_view(d).await;
    // A reap decides retries from the project's settings: it waits for an unsettled edit.
    let exited = if view.usable() {
        std::mem::take(&mut d.runs.exited)
    } else {
        Vec::new()
    };
    // What waits to be written: transitions decided before, and exits seen but not yet
    // settled (during an outage, the loop may not have reached an EVAL since they came).
    let unwritten = d.runs.pending.len() + exited.len();
    let mut batch = std::mem::take(&mut d.runs.pending);
    // Refused transitions whose wait is over are tried again with the rest.
    let retried = take_due_refused(&mut d.runs.refused, &mut batch);
    let slots: BTreeMap<RunId, SlotView> = d
        .runs
        .slots
        .iter()
        .map(|s| {
            let policy = RetryPolicy::for_project(&d.config.current, &s.project);
            (s.run_id, (s.token, s.attempt, policy, s.command_pid))
        })
        .collect();
    let live = d.runs.slots.running_set();
    let gates = EvalGates {
        sweep_removed: d.config.sweep_removed,
        fire_schedules: view.usable(),
        claim: spawn_hold_over(d),
        config_version: d.host.published_version,
    };
    let started = std::time::Instant::now();
    let config = d.config.current.clone();
    let store = d.setup.store.clone();
    let state = d.setup.state.clone();
    let epoch = d.host.epoch;
    let mut fire_backoff = std::mem::take(&mut d.holds.fire_backoff);
    let mut claim_backoff = std::mem::take(&mut d.holds.claim_backoff);

    let (mut outcome, reaped, fire_backoff, claim_backoff) =
        tokio::task::spawn_blocking(move || {
            let now = now_ms();
            let mut reaped = reap(state.root(), exited, &slots, now);
            batch.append(&mut reaped.transitions);
            fail::fail_point!("daemon-before-finalize", |_| std::process::abort());
            let outcome = eval_blocking(
                &store,
                epoch,
                &config,
                batch,
                live,
                gates,
                &mut fire_backoff,
                &mut claim_backoff,
                now,
            );
            (outcome, reaped, fire_backoff, claim_backoff)
        })
        .await
        .expect("EVAL panicked");
    d.holds.fire_backoff = fire_backoff;
    d.holds.claim_backoff = claim_backoff;
    fail::fail_point!("daemon-after-finalize", |_| std::process::abort());

    note_unreadable(&mut d.holds.reap_failures, &reaped.unreadable);
    if let Some(rows) = &outcome.unreadable_active {
        note_unreadable_rows(&mut d.holds.unreadable_rows, rows);
    }
    d.runs.exited.extend(
        reaped
            .unreadable
            .into_iter()
            .map(|(id, token, _)| (id, token)),
    );
    for (run_id, token) in reaped.still_locked {
        watch_lock(d.setup.state.root(), run_id, token, d.setup.events.clone());
    }
    for (run_id, token, pgid, session) in reaped.orphaned {
        end_orphaned(run_id, pgid, session);
        watch_group(pgid, session, run_id, token, d.setup.events.clone());
    }
    for (run_id, applied) in &outcome.applied {
        log_applied(*run_id, applied);
    }
    if outcome.failed.is_none() {
        // Everything the EVAL had to write went through: the database is there (said here,
        // before the writes below, which may find it gone again and say so themselves).
        database_reachable(&mut d.holds, &d.report.health, &mut d.recovery, unwritten);
    }
    forget_ended(d, &outcome.applied).await;
    keep_log_tails(d, &outcome.applied).await;
    if let Some((err, mut unapplied)) = outcome.failed {
        unapplied.append(&mut outcome.refused);
        eval_failed(d, err, unapplied);
        return;
    }
    // Refused even alone: tried again after a wait of its own; everything else went on.
    keep_refused(
        &mut d.runs.refused,
        &d.report.observed.metrics,
        std::mem::take(&mut outcome.refused),
        &retried,
    );
    if !database_down(&d.holds) {
        // (Lost while the log tails were kept, the outage keeps its pause.)
        d.holds.backoff.reset();
    }
    d.config.sweep_removed = false;
    let metrics = &d.report.observed.metrics;
    metrics.claimed(&outcome.claimed, now_ms());
    let next = match (outcome.next_not_before, outcome.next_occurrence) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    d.holds.next_due = next.map(|at| {
        let ms = at.saturating_sub(now_ms()).max(0) as u64;
        Instant::now() + Duration::from_millis(ms)
    });
    if let Some(at) = refused_due(&d.runs.refused) {
        d.holds.next_due = Some(d.holds.next_due.map_or(at, |d| d.min(at)));
    }
    // A run held back after a refused claim is asked for again once its wait is over; the
    // runs behind it in its project are asked for at once, in its place (an EVAL now).
    let now = now_ms();
    d.report
        .observed
        .metrics
        .refused_claims(d.holds.claim_backoff.held_at(now));
    if let Some(at) = d.holds.claim_backoff.next_due(now) {
        let at = Instant::now() + Duration::from_millis(at.saturating_sub(now).max(0) as u64);
        d.holds.next_due = Some(d.holds.next_due.map_or(at, |d| d.min(at)));
    }
    if outcome.claims_refused > 0 {
        wake_within(d, Duration::ZERO);
    }
    wake_after_spawn_hold(d);
    if let (false, Some(left)) = (view.usable(), view.settle_left()) {
        // Reaps and schedules waited for the edit: look again once it has settled.
        wake_within(d, left);
    }

    for run in outcome.claimed {
        tracing::info!(
            run = run.id,
            project = %run.project,
            attempt = run.attempt,
            namespace = %run.namespace,
            "run claimed"
        );
        let failed = run.hook_of.and_then(|id| outcome.failed_runs.get(&id));
        spawn(d, run, failed);
    }
    signal_cancelled(
        &mut d.runs.slots,
        d.setup.state.root(),
        &outcome.db_active,
        &mut |shim, signal| shim.signal(signal),
    );
    d.report.observed.metrics.eval_took(started.elapsed());
    // Last: it may read (and apply) a newer file, and the claims above were packed with the
    // config they will be spawned with.
    if !outcome.unknown_queued.is_empty() {
        end_removed(d, outcome.unknown_queued).await;
    }
}

/// A shim reported that its run's command started, with the command's pid: the `running`
/// transition is written by the next EVAL, with the others.
pub(super) fn shim_running(d: &mut Daemon, run_id: RunId, token: u64, pid: i32) {
    if let Some(slot) = d.runs.slots.get_mut(run_id).filter(|s| s.token == token) {
        slot.command_pid = Some(pid);
    }
    d.runs.pending.push(Transition {
        run_id,
        token,
        change: store::Change::Running { pid: Some(pid) },
    });
}

/// A shim of the claim `token` is gone: the next EVAL reaps it (reads its run files).
pub(super) fn shim_exited(d: &mut Daemon, run_id: RunId, token: u64) {
    d.runs.exited.push((run_id, token));
}

/// Removes from the slot pool the runs whose transition left them past active (ended, or
/// queued again), and those the database already holds past it
/// ([`crate::core::slots`]).
async fn forget_ended(d: &mut Daemon, applied: &[(RunId, Applied)]) {
    for (run_id, why) in release_ended(&mut d.runs.slots, applied) {
        // `Some(None)`: the row is gone; `None`: it could not be read.
        let status = match store_get(d, run_id).await {
            Ok(run) => Some(Some(run.status)),
            Err(StoreError::UnknownRun(_)) => Some(None),
            Err(_) => None,
        };
        match status {
            // Moved back under its claim, or deleted, by another writer: what the
            // claim's shim reported is not written, so it is said here.
            Some(Some(RunStatus::Queued) | None) => {
                tracing::warn!(run = run_id, why = %why, "transition skipped");
            }
            // Ended already (by `fleet hosts forget`, or another writer), or under
            // a newer claim.
            _ => tracing::debug!(run = run_id, why = %why, "transition skipped"),
        }
        // The slot goes with its shim's hold on the run, whatever the row says.
        if shim_done(d, run_id, status) {
            d.runs.slots.remove(run_id);
        }
    }
}

/// [`shim_done_with`] for a slot of this daemon, with real processes.
pub(super) fn shim_done(d: &Daemon, run_id: RunId, status: Option<Option<RunStatus>>) -> bool {
    shim_done_with(
        &d.runs.slots,
        run_id,
        status,
        d.setup.state.root(),
        &|shim| shim.is_alive(),
    )
}

/// After a store error: keep what is unwritten for the next EVAL and back off (100 ms,
/// doubling up to 5 s; for an unreachable database, see [`super::outage`]) — or, when fenced
/// off, stop for good.
fn eval_failed(d: &mut Daemon, err: StoreError, unapplied: Vec<Transition>) {
    if let StoreError::Fenced { .. } = err {
        // Another daemon took the state directory over: this one must not write again.
        tracing::error!(error = %err, "fenced off: stopping");
        d.host.fenced = Some(err);
        return;
    }
    // Kept first: the exits reaped during an outage are written once it ends.
    d.runs.pending = unapplied;
    if database_unreachable(&mut d.holds, &d.report.health, &err, "EVAL") {
        return;
    }
    if err.is_busy() {
        d.report.observed.metrics.busy_retry();
    }
    d.holds.backoff.set_limits(EVAL_RETRY_FIRST, EVAL_RETRY_MAX);
    let wait = d.holds.backoff.fail(Instant::now());
    tracing::warn!(error = %err, retry_in_ms = wait.as_millis() as u64, "EVAL could not finish; retrying later");
}

async fn store_get(d: &Daemon, id: RunId) -> Result<Run, StoreError> {
    let store = d.setup.store.clone();
    tokio::task::spawn_blocking(move || store.get_run(id))
        .await
        .expect("get_run panicked")
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

/// Logs what one written transition did to its run: its start (with the command's pid), its
/// requeue, or its end (status, exit code or signal, how long it ran, its note and its retry).
/// Field values are plain words and numbers, so that an operator (or `grep`) reads them as
/// written.
fn log_applied(run_id: RunId, applied: &Applied) {
    let Applied::Done {
        status,
        retry,
        run,
        hook,
    } = applied
    else {
        return;
    };
    let project = run.project.as_str();
    if let Some(hook) = hook {
        tracing::info!(
            run = run_id,
            project = %project,
            status = %status,
            hook_run = hook,
            "failure hook queued"
        );
    }
    match status {
        RunStatus::Running => {
            let pid = run
                .pid
                .map_or_else(|| "unknown".to_string(), |p| p.to_string());
            tracing::info!(run = run_id, project = %project, pid = %pid, "run started");
        }
        RunStatus::Queued => {
            tracing::info!(
                run = run_id,
                project = %project,
                attempt = run.attempt,
                "run requeued: its command never started"
            );
        }
        _ => {
            let duration = match (run.started_at, run.finished_at) {
                // `checked_sub`: the times are whatever the row holds, another program's too.
                (Some(s), Some(f)) if f >= s => f.checked_sub(s).map_or_else(
                    || "unknown".to_string(),
                    |d| format!("{:.3}s", d as f64 / 1000.0),
                ),
                _ => "unknown".to_string(),
            };
            let note = run.reason.as_deref().unwrap_or("");
            let retry = retry.map_or_else(|| "none".to_string(), |id| id.to_string());
            match (run.exit_code, run.signal) {
                (Some(code), _) => tracing::info!(
                    run = run_id,
                    project = %project,
                    status = %status,
                    exit_code = code,
                    duration = %duration,
                    attempt = run.attempt,
                    retry = %retry,
                    note = %note,
                    "run ended"
                ),
                (None, Some(signal)) => tracing::info!(
                    run = run_id,
                    project = %project,
                    status = %status,
                    signal,
                    duration = %duration,
                    attempt = run.attempt,
                    retry = %retry,
                    note = %note,
                    "run ended"
                ),
                (None, None) => tracing::info!(
                    run = run_id,
                    project = %project,
                    status = %status,
                    duration = %duration,
                    attempt = run.attempt,
                    retry = %retry,
                    note = %note,
                    "run ended"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use packer::ActiveRun;
    use store::{NewRun, Trigger};

    use super::*;
    use crate::schedule::FireBackoff;

    const NOW: Millis = 1_800_000_000_000;

    /// An install of one daemon with a global cap of 1 and two projects, `a` and `b`, on a
    /// SQLite store under `dir`: the store, the config, the daemon's epoch.
    fn install(dir: &Path) -> (Store, Config, i64) {
        let text = format!(
            "state_dir = {:?}\nmax_concurrency = 1\n\
             [projects.a]\ncommand = [\"true\"]\n[projects.b]\ncommand = [\"true\"]\n",
            dir.display().to_string()
        );
        let config = Config::parse(&text, &dir.join("fleet.toml")).expect("config");
        let store = Store::open(&dir.join("fleet.db"), Duration::from_secs(5)).expect("store");
        let caps = crate::caps::caps_json(&config);
        let epoch = store
            .take_over_from(&config.host, None, 1, "fleet.toml", &caps, NOW)
            .expect("take over");
        (store, config, epoch)
    }

    fn enqueue(store: &Store, project: &str) -> RunId {
        let new = NewRun {
            project: project.into(),
            namespace: "default".into(),
            priority: 0,
            trigger: Trigger::Manual,
            occurrence: None,
            not_before: 0,
            args: Vec::new(),
            env: Vec::new(),
            rerun_of: None,
            hook_of: None,
        };
        store.enqueue(&new, NOW).expect("enqueue")
    }

    fn gates() -> EvalGates {
        EvalGates {
            sweep_removed: true,
            fire_schedules: true,
            claim: true,
            config_version: None,
        }
    }

    /// The first half of an EVAL with the pool's running set `live`: what it read, and the
    /// claim requests of its picks.
    fn pack(
        store: &Store,
        config: &Config,
        epoch: i64,
        live: RunningSet,
    ) -> (EvalOutcome, Vec<ClaimRequest>) {
        eval_until_claim(
            store,
            epoch,
            config,
            Vec::new(),
            live,
            gates(),
            &mut FireBackoff::default(),
            &mut ClaimBackoff::default(),
            NOW,
        )
    }

    /// A whole EVAL with the pool's running set `live`: the runs it claimed.
    fn claim(store: &Store, config: &Config, epoch: i64, live: RunningSet) -> Vec<Run> {
        let (mut out, requests) = pack(store, config, epoch, live);
        claim_packed(
            store,
            epoch,
            &requests,
            &mut ClaimBackoff::default(),
            NOW,
            &mut out,
        );
        assert!(out.failed.is_none(), "{:?}", out.failed);
        out.claimed
    }

    fn ids(requests: &[ClaimRequest]) -> Vec<RunId> {
        requests.iter().map(|r| r.run_id).collect()
    }

    /// The end of a command that exited 0.
    fn finish() -> Change {
        Change::Finish {
            status: RunStatus::Succeeded,
            exit_code: Some(0),
            signal: None,
            reason: None,
            retry: None,
            finished_at: None,
        }
    }

    fn pool_of(run: &Run) -> RunningSet {
        std::iter::once(ActiveRun {
            run_id: run.id,
            project: run.project.clone(),
            namespace: run.namespace.clone(),
            host: None,
        })
        .collect()
    }

    /// A run cancelled between an EVAL's packing and its claim is not claimed: the claim checks
    /// the run is still queued in its own transaction, whatever the packing read.
    #[test]
    fn a_run_cancelled_after_the_packing_is_not_claimed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, config, epoch) = install(dir.path());
        let id = enqueue(&store, "a");
        let (mut out, requests) = pack(&store, &config, epoch, RunningSet::default());
        assert_eq!(ids(&requests), [id]);
        let cancelled = store.cancel_queued_runs(&[id], "by hand", NOW);
        assert_eq!(cancelled.expect("cancel"), [id]);
        let mut claim_backoff = ClaimBackoff::default();
        claim_packed(&store, epoch, &requests, &mut claim_backoff, NOW, &mut out);
        assert!(out.failed.is_none(), "{:?}", out.failed);
        assert!(out.claimed.is_empty(), "claimed {:?}", out.claimed);
        assert_eq!(store.get_run(id).expect("row").status, RunStatus::Cancelled);
    }

    /// After a restart the pool is empty while the database still lists a run in flight: the
    /// packing counts it (the merge), and picks nothing over the cap.
    #[test]
    fn a_run_the_database_holds_active_takes_its_seat_though_the_pool_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, config, epoch) = install(dir.path());
        enqueue(&store, "a");
        assert_eq!(
            claim(&store, &config, epoch, RunningSet::default()).len(),
            1
        );
        enqueue(&store, "b");
        let (_, requests) = pack(&store, &config, epoch, RunningSet::default());
        assert!(requests.is_empty(), "picked {:?}", ids(&requests));
    }

    /// A command the pool still runs takes its seat though its row was ended (by another
    /// program): the packing counts the pool too (the merge), and picks nothing over the cap
    /// until its slot goes. The claim, which counts the database's rows alone, would not stop
    /// it.
    #[test]
    fn a_command_the_pool_runs_takes_its_seat_though_its_row_ended() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, config, epoch) = install(dir.path());
        enqueue(&store, "a");
        let a = claim(&store, &config, epoch, RunningSet::default())[0].clone();
        let end = Transition {
            run_id: a.id,
            token: a.claim_token,
            change: finish(),
        };
        // Written as another writer would: the row ends while the command runs on.
        store
            .apply_with_hooks(epoch, &[end], &Default::default(), NOW)
            .expect("end");
        let b = enqueue(&store, "b");
        assert!(claim(&store, &config, epoch, pool_of(&a)).is_empty());
        // Its slot gone, the seat is free.
        let claimed = claim(&store, &config, epoch, RunningSet::default());
        assert_eq!(claimed.iter().map(|r| r.id).collect::<Vec<_>>(), [b]);
    }

    /// The packing's running set loses a run whose end a transition of this EVAL wrote, keeps
    /// one whose start report the database skipped (its command runs), and loses one whose end
    /// it skipped (the database already holds it past active).
    #[test]
    fn without_ended_drops_the_runs_a_written_end_took_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, config, epoch) = install(dir.path());
        enqueue(&store, "a");
        let a = claim(&store, &config, epoch, RunningSet::default())[0].clone();
        let live = pool_of(&a);
        let start = Transition {
            run_id: a.id,
            token: a.claim_token,
            change: Change::Running { pid: Some(1) },
        };
        let end = Transition {
            change: finish(),
            ..start.clone()
        };
        let skipped = Applied::Skipped("the run is already past it".into());
        let kept = without_ended(live.clone(), &[start], std::slice::from_ref(&skipped));
        assert_eq!(kept.len(), 1);
        assert_eq!(without_ended(live, &[end], &[skipped]).len(), 0);
    }
}
