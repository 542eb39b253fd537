//! Startup recovery: before the first EVAL, settle every run the database records as active,
//! which a previous daemon left behind.
//!
//! Alive ⇒ adopt (into the slot pool, counted against every cap, followed through its lock);
//! ended ⇒ its real status; never started ⇒ tombstone and requeue; unknown ⇒ lost (retried if
//! attempts remain). A live shim of a run the database does not hold as active is reported and
//! left alone, but its seats are held until it ends ([`Found::held`]).
//!
//! A run's retry follows its project's settings; for a project the config does not know (it
//! gets none), recovery first makes sure the config is the file's, and waits while an edit of
//! the file settles.
//!
//! Nothing may be claimed before recovery has run to the end: the loop retries it, with backoff,
//! until it has. A run whose files could not be read (or its tombstone written), or whose row
//! holds a value another program wrote that fleet cannot read, stays active and is settled
//! again, with backoff, until it is ([`Unsettled`]). This module must never start a
//! shim nor decide a fate itself (that is [`crate::settle`]'s), and writes to the database only
//! through [`Supervised::pending`](super::state::Supervised::pending).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use store::{now_ms, Run, RunId, Store, StoreError, Transition};
use tokio::time::Instant;

use super::follow::{watch_group, watch_lock};
use super::outage::{database_reachable, database_unreachable};
use super::reload::config_view;
use super::state::unsettled::Unsettled;
use super::state::Daemon;
use crate::boot::Boots;
use crate::core::recovery::{self, adopted_slot, Found, Unrecorded};
use crate::slots::ShimIdentity;

/// The first wait after startup recovery could not read the database (but for an unreachable
/// one); it doubles up to [`RECOVERY_RETRY_MAX`].
const RECOVERY_RETRY_FIRST: Duration = Duration::from_millis(200);
/// The longest wait between two attempts at startup recovery.
const RECOVERY_RETRY_MAX: Duration = Duration::from_secs(5);

/// Runs startup recovery and applies what it decided. On a database error nothing is
/// applied, [`RecoveryState::done`](super::state::RecoveryState::done) stays false and a backoff is set; the loop calls this again.
pub(super) async fn recover(d: &mut Daemon) {
    let store = d.setup.store.clone();
    let state = d.setup.state.clone();
    let host = d.config.current.host.clone();
    let shared = state.database().is_some();
    let boots = d.setup.boots.clone();
    let epoch = d.host.epoch;
    let result = tokio::task::spawn_blocking(move || {
        settle_active(&store, (&host, epoch), state.root(), shared, &boots)
    })
    .await
    .expect("recovery panicked");
    match result {
        Ok(found) => {
            if let Some(left) = config_settling_for(d, &found).await {
                // Nothing was applied; recovery runs again once the file has settled.
                // A wait, not a failure: the next failure doubles it all the same.
                d.holds.backoff.hold(Instant::now(), left);
                return;
            }
            let (transitions, unsettled) = take_in(d, found);
            fail::fail_point!("recovery-before-apply", |_| std::process::abort());
            d.runs.pending.extend(transitions);
            // Recovery's is the first attempt at them.
            d.recovery.unsettled.retry.reset();
            keep_unsettled(d, unsettled);
            d.recovery.done = true;
            d.holds.backoff.reset();
            database_reachable(
                &mut d.holds,
                &d.report.health,
                &mut d.recovery,
                d.runs.pending.len(),
            );
        }
        Err(e) => {
            if database_unreachable(&mut d.holds, &d.report.health, &e, "recovery") {
                return;
            }
            if e.is_busy() {
                d.report.observed.metrics.busy_retry();
            }
            d.holds
                .backoff
                .set_limits(RECOVERY_RETRY_FIRST, RECOVERY_RETRY_MAX);
            let wait = d.holds.backoff.fail(Instant::now());
            tracing::error!(error = %e, retry_in_ms = wait.as_millis() as u64, "recovery could not read the database; retrying");
        }
    }
}

/// `Some(wait)` when recovery found a run of a project the config does not know while an
/// edit of fleet.toml has not settled yet: such a run gets no retry, and that is decided only
/// on the file as it is now, never on a config older than it.
async fn config_settling_for(d: &mut Daemon, found: &Found) -> Option<Duration> {
    let unknown = found
        .settled
        .iter()
        .any(|(r, _)| !d.config.current.projects.contains_key(&r.project));
    if !unknown {
        return None;
    }
    let view = config_view(d).await;
    match (view.usable(), view.settle_left()) {
        (false, Some(left)) => Some(left),
        _ => None,
    }
}

/// Settles again, once their retry is due, the runs recovery could not settle (see
/// [`Unsettled`]), and applies what it decides as recovery does. Does nothing before then.
pub(super) async fn resettle(d: &mut Daemon) {
    let Some(at) = d.recovery.unsettled.retry.due() else {
        return;
    };
    if Instant::now() < at {
        return;
    }
    let wanted = d.recovery.unsettled.runs.clone();
    let store = d.setup.store.clone();
    let state = d.setup.state.clone();
    let host = d.config.current.host.clone();
    let boots = d.setup.boots.clone();
    let epoch = d.host.epoch;
    let result = tokio::task::spawn_blocking(move || {
        // Only those still active under the same claim: anything else has moved on.
        let active = store.active_rows_here(&host, epoch)?;
        let runs: Vec<Run> = active
            .runs
            .into_iter()
            .filter(|r| wanted.contains(&(r.id, r.claim_token)))
            .collect();
        let mut found = settle_here(&runs, state.root(), &boots);
        // Rows still unreadable wait on.
        found.unsettled.extend(
            active
                .unreadable
                .iter()
                .map(|r| (r.id, r.claim_token))
                .filter(|key| wanted.contains(key)),
        );
        Ok::<_, StoreError>(found)
    })
    .await
    .expect("settling again panicked");
    match result {
        Ok(found) => {
            if let Some(left) = config_settling_for(d, &found).await {
                // Nothing was applied; these runs are settled again once the file has.
                d.recovery.unsettled.retry.postpone(Instant::now(), left);
                return;
            }
            let (transitions, unsettled) = take_in(d, found);
            d.runs.pending.extend(transitions);
            keep_unsettled(d, unsettled);
        }
        Err(e) => {
            let runs = std::mem::take(&mut d.recovery.unsettled.runs);
            if !database_unreachable(&mut d.holds, &d.report.health, &e, "settling runs again") {
                tracing::error!(error = %e, "could not read the database to settle runs again");
            }
            keep_unsettled(d, runs);
        }
    }
}

/// After an outage ([`super::outage`]): settles the runs the database holds as active
/// under this daemon's epoch that no slot, pending transition or [`Unsettled`] accounts
/// for. A claim whose commit went through while its connection was lost left such a run:
/// `starting`, with no shim (its fate is `never_started`, and it is queued again). Done
/// once, after an EVAL that wrote everything pending; tried again while it fails.
pub(super) async fn reconcile(d: &mut Daemon) {
    let known: BTreeSet<RunId> = d
        .runs
        .slots
        .iter()
        .map(|s| s.run_id)
        .chain(d.runs.pending.iter().map(|t| t.run_id))
        .chain(d.recovery.unsettled.runs.iter().map(|(id, _)| *id))
        .collect();
    let store = d.setup.store.clone();
    let state = d.setup.state.clone();
    let epoch = d.host.epoch;
    let boots = d.setup.boots.clone();
    let result = tokio::task::spawn_blocking(move || {
        // An unreadable row is left to the EVAL, which counts its seat: which epoch claimed
        // it is one of the things that cannot be told.
        let runs: Vec<Run> = store
            .active_rows()?
            .runs
            .into_iter()
            .filter(|r| r.epoch == Some(epoch) && !known.contains(&r.id))
            .collect();
        Ok::<_, StoreError>(settle_here(&runs, state.root(), &boots))
    })
    .await
    .expect("reconciling panicked");
    match result {
        Ok(found) => {
            if config_settling_for(d, &found).await.is_some() {
                // Decided on the file as it is once its edit has settled: at a later turn.
                return;
            }
            d.recovery.reconcile_due = false;
            for (run, _) in &found.settled {
                tracing::warn!(run = run.id, project = %run.project, "an active run no shim held after the database came back (a claim committed as its connection was lost)");
            }
            let (transitions, unsettled) = take_in(d, found);
            d.runs.pending.extend(transitions);
            if !unsettled.is_empty() {
                // They join those already waiting.
                let mut runs = std::mem::take(&mut d.recovery.unsettled.runs);
                runs.extend(unsettled);
                // The wait starts over at the first one for all of them (the attempts
                // logged go on counting).
                d.recovery.unsettled.retry.reset();
                keep_unsettled(d, runs);
            }
        }
        Err(e) => {
            if !database_unreachable(
                &mut d.holds,
                &d.report.health,
                &e,
                "reconciling after the outage",
            ) {
                tracing::warn!(error = %e, "could not read the active runs after the outage; trying again");
            }
        }
    }
}

/// Takes in what settling found: adopts the live runs, and returns the transitions of the
/// rest (with retries per the config in force) and the runs that could not be settled, for
/// the caller to queue and keep.
fn take_in(d: &mut Daemon, found: Found) -> (Vec<Transition>, Vec<(RunId, u64)>) {
    let Found {
        adopt,
        mut transitions,
        settled,
        unsettled,
        orphaned,
        taken,
        held,
    } = found;
    for (run, fate) in &settled {
        tracing::info!(run = run.id, project = %run.project, fate = %fate.name(), "recovered");
    }
    transitions.extend(recovery::transitions(&d.config.current, settled, now_ms()));
    adopt_alive(d, adopt);
    keep_orphaned(d, orphaned);
    stop_taken(d, taken);
    hold_unrecorded(d, held);
    (transitions, unsettled)
}

/// Stops the commands of runs taken from this host ([`Found::taken`]) as a cancel does
/// (SIGTERM to the shim, which ends the command's process group, SIGKILL after its kill
/// grace), and holds a slot for each until its shim is gone, so that this host starts
/// nothing beside it — above all not the run's own retry. Its row is left as the forget
/// wrote it: the shim's end, when reaped, is a transition the store skips.
fn stop_taken(d: &mut Daemon, taken: Vec<(Run, Option<ShimIdentity>)>) {
    for (run, shim) in taken {
        if d.runs.slots.iter().any(|s| s.run_id == run.id) {
            // Already being stopped (a daemon that rejoined after it was forgotten).
            continue;
        }
        let sent = shim.is_some_and(|s| s.signal(crate::sys::signals::Signal::SIGTERM));
        super::hosts::warn_taken(&run, sent);
        let mut slot = adopted_slot(&run, shim);
        slot.cancel_sent = true;
        d.runs.slots.insert(slot);
        watch_lock(
            d.setup.state.root(),
            run.id,
            run.claim_token,
            d.setup.events.clone(),
        );
    }
}

/// Holds a slot for each run a live shim here holds although the database does not hold it as
/// active here ([`Found::held`]), and follows it through its lock: the command is left alone,
/// its seats counted until the shim lets the lock go. Its end, when reaped, is a transition
/// the store skips.
fn hold_unrecorded(d: &mut Daemon, held: Vec<(Run, ShimIdentity)>) {
    for (run, shim) in held {
        if d.runs.slots.iter().any(|s| s.run_id == run.id) {
            continue;
        }
        tracing::warn!(run = run.id, project = %run.project, status = %run.status, "a live shim holds a run the database does not record as active; left alone, its seats held until it ends (see `fleet check`)");
        d.runs.slots.insert(adopted_slot(&run, Some(shim)));
        watch_lock(
            d.setup.state.root(),
            run.id,
            run.claim_token,
            d.setup.events.clone(),
        );
    }
}

/// Puts the runs whose shim is alive in the slot pool, and follows each through its lock.
fn adopt_alive(d: &mut Daemon, adopt: Vec<(Run, Option<ShimIdentity>)>) {
    for (run, shim) in adopt {
        tracing::info!(run = run.id, project = %run.project, "adopted a live run");
        d.runs.slots.insert(adopted_slot(&run, shim));
        watch_lock(
            d.setup.state.root(),
            run.id,
            run.claim_token,
            d.setup.events.clone(),
        );
    }
}

/// Puts the orphaned runs (shim gone, command's process group still there) in the slot
/// pool, with no shim to signal, and follows each through its process group: the run ends
/// `lost` once the group is empty, never while something it started still runs.
fn keep_orphaned(d: &mut Daemon, orphaned: Vec<(Run, i32, Option<crate::sys::process::Session>)>) {
    for (run, pgid, session) in orphaned {
        d.runs.slots.insert(adopted_slot(&run, None));
        watch_group(
            pgid,
            session,
            run.id,
            run.claim_token,
            d.setup.events.clone(),
        );
    }
}

/// Records the runs still unsettled, and when to try again: the wait before this attempt
/// doubled, up to [`RESETTLE_MAX`](super::state::unsettled::RESETTLE_MAX) (the first wait
/// after a reset of [`Unsettled::retry`]).
fn keep_unsettled(d: &mut Daemon, runs: Vec<(RunId, u64)>) {
    if runs.is_empty() {
        d.recovery.unsettled = Unsettled::default();
        return;
    }
    let mut retry = d.recovery.unsettled.retry;
    let wait = retry.fail(Instant::now());
    let attempts = d.recovery.unsettled.attempts + 1;
    if attempts.is_power_of_two() {
        tracing::warn!(
            runs = ?runs.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            retry_in = ?wait,
            attempts,
            "runs left active: their files or their rows could not be read, or their files written; settling them again later (logged again at the 2nd, 4th, 8th… attempt)"
        );
    }
    d.recovery.unsettled = Unsettled {
        runs,
        retry,
        attempts,
    };
}

/// Settles every run the database records as active on `host` and claimed from this daemon's
/// place (`host` with this daemon's epoch; blocking: reads the database and the run files under
/// `state_dir`, and writes tombstones). Another host's runs are never touched here, nor runs of
/// this host name claimed by a daemon of another machine or state directory: their run files
/// are there, and only a daemon there (or an operator's `fleet hosts forget`) may end them.
///
/// Errors: the database cannot be read. A run whose files cannot be read (or whose tombstone
/// cannot be written) is logged and left active, in [`Found::unsettled`].
///
/// Live shims of runs the database does not hold as active are looked for too, before the
/// first claim ([`recovery::unrecorded`]: a few lock probes per segment of run files and per
/// live shim): such a command still runs and takes its seats, whatever its row says (another
/// program may have ended the row while it ran), so its slot is held until its shim ends
/// ([`Found::held`]); on a database `shared` by many hosts it may be a run a `fleet hosts
/// forget` took from this host, whose command must stop before this host starts anything
/// beside it ([`Found::taken`]).
fn settle_active(
    store: &Store,
    (host, epoch): (&str, i64),
    state_dir: &Path,
    shared: bool,
    boots: &Boots,
) -> Result<Found, StoreError> {
    let active = store.active_rows_here(host, epoch)?;
    let mut recovery = settle_here(&active.runs, state_dir, boots);
    // A row another program left unreadable is settled once it can be read: until then it stays
    // active, its seat counted by every EVAL (which reads it the same way), its shim — if one
    // still runs — left alone.
    recovery
        .unsettled
        .extend(active.unreadable.iter().map(|r| (r.id, r.claim_token)));
    let active_ids: BTreeSet<RunId> = active
        .runs
        .iter()
        .map(|r| r.id)
        .chain(active.unreadable.iter().map(|r| r.id))
        .collect();
    // Before the first claim: a command still running counts against the caps, whatever its
    // row says (another program may have ended it while it ran).
    for found in recovery::unrecorded(store, state_dir, &active_ids)? {
        match found {
            Unrecorded::Row(mut run, token, shim) => {
                // Ended `lost` by a `fleet hosts forget` under this very claim, on this host,
                // while its daemon was away: its command is stopped.
                let forgotten = shared
                    && store::ended_by_forget(&run)
                    && run.claim_token == token
                    && run.host.as_deref() == Some(host);
                if forgotten {
                    recovery.taken.push((*run, Some(shim)));
                } else {
                    // The slot follows the shim's claim, whatever the row's is now.
                    run.claim_token = token;
                    recovery.held.push((*run, shim));
                }
            }
            Unrecorded::Unknown(id) => warn_unrecorded(id),
        }
    }
    Ok(recovery)
}

/// Warns about a live shim of a run the database does not record as active. Never acts on
/// it: which of the two is wrong is for an operator to judge, with `fleet check`.
fn warn_unrecorded(id: RunId) {
    tracing::warn!(run = id, "a live shim holds a run the database does not record as active; left alone (see `fleet check`)");
}

/// [`recovery::settle_runs`], then what the daemon does at once with an orphaned run whose
/// group its session identifies: SIGKILL to the group, as the shim would have on its way out
/// ([`super::reap::end_orphaned`]), so that nothing of it runs beside a retry.
fn settle_here(runs: &[Run], state_dir: &Path, boots: &Boots) -> Found {
    let found = recovery::settle_runs(runs, state_dir, boots);
    for (run, pgid, session) in &found.orphaned {
        super::reap::end_orphaned(run.id, *pgid, *session);
    }
    found
}
