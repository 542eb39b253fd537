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

use std::collections::BTreeMap;
use std::time::Duration;

use store::{now_ms, Applied, Run, RunId, RunStatus, StoreError, Transition};
use tokio::time::Instant;

use super::eval_blocking::{eval_blocking, EvalGates};
use super::follow::{watch_group, watch_lock};
use super::hosts::{follow_published, keep_log_tails};
use super::outage::{database_down, database_reachable, database_unreachable};
use super::reap::end_orphaned;
use super::refused::{keep_refused, refused_due, take_due_refused};
use super::reload::{config_view, end_removed, wake_within};
use super::spawn::{spawn, spawn_hold_over, wake_after_spawn_hold};
use super::state::Daemon;
use super::unreadable::{note_unreadable, note_unreadable_rows};
use crate::core::cancel::signal_cancelled;
use crate::core::reap::{reap, SlotView};
use crate::core::slots::{release_ended, shim_done_with};
use crate::retry::RetryPolicy;

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
