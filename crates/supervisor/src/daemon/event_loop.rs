//! The loop: wait until something happens, take everything that happened, run one EVAL.
//!
//! It wakes on an [`Event`] (a shim started or exited, a nudge, a reload request, an edit of
//! fleet.toml, a stop signal), on the backstop tick, and when something timed becomes due (a
//! delayed retry, a schedule occurrence, the end of a backoff, a settled edit). Every event
//! already waiting joins the wake-up, so the triggers that arrive during an EVAL are coalesced
//! into exactly one more. A tick alone runs an EVAL only if something may have changed
//! ([`TickFilter`]).
//!
//! At every tick it also checks that the state directory is still the one this daemon opened
//! ([`still_opened`]): one removed or replaced under it (`rm -rf`, a directory or a database
//! moved into its place, a restored backup) ends the loop, since nothing it would write could
//! ever be read, and a daemon started meanwhile may have taken what is there now.
//!
//! This module decides *when* to EVAL, never *what* an EVAL does: it must not touch the
//! database or the slot pool except through the phases ([`recover`](super::recover::recover),
//! [`reload_config`](super::reload::reload_config), [`eval`](super::eval::eval)) and the epoch read of [`still_opened`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::config_file::RELOAD_SETTLE;
use super::eval::{eval, shim_exited, shim_running};
use super::events::{Event, Inbox};
use super::hosts::{heartbeat, rejoin};
use super::outage::database_down;
use super::recover::{reconcile, recover, resettle};
use super::reload;
use super::reload::reload_config;
use super::state::Daemon;
use super::turn::turn;
use crate::statedir::{Opened, StateDirError};

/// A tick runs a full EVAL at least this often, even when nothing seems to have changed.
pub(super) const FULL_EVAL_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// Runs the loop until a stop signal, or until the daemon is fenced off
/// ([`Membership::fenced`](super::state::Membership::fenced)). `reload_due`: reload at this instant (the file changed during setup).
/// `opened`: the state directory as the daemon opened it.
///
/// Errors: the state directory, its database or its lock is no longer the one in `opened`
/// ([`StateDirError::Replaced`]); the loop has stopped.
pub(super) async fn run(
    daemon: &mut Daemon,
    mut inbox: Inbox,
    reload_due: Option<Instant>,
    opened: &Opened,
) -> Result<(), StateDirError> {
    let mut wake = Wakeup {
        reload_due,
        reload_now: false,
        reload_asked: false,
        stop: None,
    };
    let mut ticks = TickFilter::open(&daemon.setup.store).await;
    let mut tick = ticker(daemon.config.current.tick);
    let mut last_look = Instant::now();
    let mut prune = super::prune_step::PruneStep::new();
    let mut last_heartbeat = None;
    loop {
        let due = wake.timer(daemon);
        let by_tick = tokio::select! {
            Some(event) = inbox.recv() => { wake.note(daemon, event); false }
            _ = tick.tick() => true,
            _ = sleep_until_opt(due) => false,
        };
        while let Ok(event) = inbox.try_recv() {
            wake.note(daemon, event);
        }
        if let Some(signal) = wake.stop {
            daemon.report.notifier.stopping();
            tracing::info!("{signal}: stopping; shims keep running and will be adopted");
            return Ok(());
        }
        // At every tick, and at least once a tick however busy the loop is.
        if by_tick || last_look.elapsed() >= daemon.config.current.tick {
            last_look = Instant::now();
            if let Err(e) = still_opened(daemon, opened).await {
                tracing::error!(
                    error = %e,
                    "the state directory changed under the daemon; stopping (start it again to use the one there now; the shims of its runs keep running)"
                );
                return Err(e);
            }
        }
        heartbeat(daemon, &mut last_heartbeat).await;
        if !fenced_may_go_on(daemon).await {
            return Ok(());
        }
        if wake.reload_due.is_some_and(|at| at <= Instant::now()) {
            wake.reload_due = None;
            wake.reload_now = true;
        }
        if std::mem::take(&mut wake.reload_now) {
            let how = if wake.reload_asked {
                reload::Reload::Asked
            } else {
                reload::Reload::Edited
            };
            match reload_config(daemon, how).await {
                // Still being written: read again once it has been quiet (an operator's
                // request stays one).
                Some(wait) => wake.reload_due = Some(Instant::now() + wait),
                None => wake.reload_asked = false,
            }
        }
        if tick.period() != daemon.config.current.tick {
            tick = ticker(daemon.config.current.tick);
            daemon.report.health.set_tick(daemon.config.current.tick);
        }
        if !daemon.holds.backoff.is_due(Instant::now()) {
            if database_down(&daemon.holds) {
                // Alive and waiting for the database, as it should: the watchdog hears so.
                daemon.report.notifier.outage_ping();
            }
            continue;
        }
        if !daemon.recovery.done {
            // Recovery could not read the database at startup: nothing may be claimed before the
            // runs a previous daemon left are adopted or settled.
            recover(daemon).await;
            if !daemon.recovery.done {
                continue;
            }
        }
        resettle(daemon).await;
        // Never waited for: it runs on a blocking thread while the loop goes on. Not while the
        // database cannot be reached: it would only fail again.
        if !database_down(&daemon.holds) {
            prune.maybe_start(daemon);
        }
        if by_tick && ticks.nothing_changed(daemon).await {
            // An idle tick is a turn too: the loop is alive and has nothing to do.
            turn(&mut daemon.report, &daemon.runs.slots, &daemon.setup.store).await;
            continue;
        }
        ticks.last_eval = Some((Instant::now(), store::now_ms()));
        eval(daemon).await;
        if !fenced_may_go_on(daemon).await {
            return Ok(());
        }
        // An EVAL that ended in a backoff (busy or unreachable database) did no work: not a turn.
        if daemon.holds.backoff.is_reset() {
            if daemon.recovery.reconcile_due {
                // After an outage, once everything decided during it is written.
                reconcile(daemon).await;
            }
            turn(&mut daemon.report, &daemon.runs.slots, &daemon.setup.store).await;
        }
    }
}

/// After a write refused as fenced: false when the daemon must stop (another daemon of this
/// host took over); when an operator forgot this host, it rejoins ([`rejoin`](super::hosts::rejoin)) and
/// goes on. True when nothing was refused.
async fn fenced_may_go_on(daemon: &mut Daemon) -> bool {
    match &daemon.host.fenced {
        None => true,
        Some(store::StoreError::Fenced {
            forgotten: true, ..
        }) => rejoin(daemon).await,
        Some(_) => false,
    }
}

/// Whether the state directory at its path is still the one this daemon opened: the same
/// directory, fleet.db and daemon.lock (device and inode, [`crate::statedir::StateDir::check_opened`]),
/// and a database whose epoch counter is not older than this daemon's epoch (on SQLite: is
/// this daemon's). The epoch catches what the inodes
/// cannot: a backup restored into the database in place (by SQLite's own restore) holds the
/// older epoch it was copied at.
///
/// Errors: [`StateDirError::Replaced`], saying what changed. A database read that fails (busy,
/// gone) proves nothing here: the EVAL reports it. While the database is known to be
/// unreachable the epoch is not read at all (each read would wait out a connection attempt);
/// it is read again at the first tick after the outage.
async fn still_opened(daemon: &Daemon, opened: &Opened) -> Result<(), StateDirError> {
    daemon.setup.state.check_opened(opened)?;
    if database_down(&daemon.holds) {
        return Ok(());
    }
    let store = daemon.setup.store.clone();
    let epoch = tokio::task::spawn_blocking(move || store.epoch())
        .await
        .expect("reading the epoch panicked");
    // SQLite's file by name (as ever), or the PostgreSQL database (no password).
    let db = match daemon.setup.state.database() {
        Some(url) => url.target().to_string(),
        None => "fleet.db".to_string(),
    };
    // On a shared database the counter moves with every other host's take-over: only an
    // older one says something here; a newer one is for the fencing of this host's own
    // writes (its heartbeat) to judge.
    let shared = daemon.setup.state.database().is_some();
    match epoch {
        Ok(now) if now < daemon.host.epoch || (now > daemon.host.epoch && !shared) => {
            Err(StateDirError::Replaced {
                path: daemon.setup.state.root().to_path_buf(),
                what: if now < daemon.host.epoch {
                    format!(
                    "its database {db} holds epoch {now}, older than this daemon's epoch {}: it was replaced by an older copy (a restored backup?)",
                    daemon.host.epoch
                )
                } else {
                    format!(
                    "its database {db} holds epoch {now}, newer than this daemon's epoch {}: another daemon took it over",
                    daemon.host.epoch
                )
                },
            })
        }
        _ => Ok(()),
    }
}

/// What the loop itself keeps between wake-ups.
struct Wakeup {
    /// A noticed edit of fleet.toml is reloaded at this instant (see [`RELOAD_SETTLE`]).
    reload_due: Option<Instant>,
    /// A reload is due: done before the next EVAL.
    reload_now: bool,
    /// The due reload was asked for by an operator (`fleet reload`, SIGHUP), not only an edit
    /// the watcher saw: it publishes the local file whenever it differs from the published one.
    reload_asked: bool,
    /// A stop signal arrived (its name).
    stop: Option<&'static str>,
}

impl Wakeup {
    /// Takes one event in: shim reports go to the EVAL that will act on them
    /// ([`shim_running`](super::eval::shim_running), [`shim_exited`](super::eval::shim_exited)), the rest to the loop.
    fn note(&mut self, daemon: &mut Daemon, event: Event) {
        match event {
            Event::ShimRunning { run_id, token, pid } => shim_running(daemon, run_id, token, pid),
            Event::ShimExited { run_id, token } => shim_exited(daemon, run_id, token),
            Event::Nudge => {}
            Event::Reload => {
                self.reload_now = true;
                self.reload_asked = true;
            }
            // Every edit pushes the reload back: it happens once the file has been quiet.
            Event::ConfigEdited => self.reload_due = Some(Instant::now() + RELOAD_SETTLE),
            Event::Stop(signal) => self.stop = Some(signal),
        }
    }

    /// When the loop must wake by itself: when delayed work is due (nothing is before a backoff
    /// ends) or a settled edit must be reloaded, whichever comes first.
    fn timer(&self, daemon: &Daemon) -> Option<Instant> {
        let work = daemon
            .holds
            .backoff
            .due()
            .or_else(|| earliest(daemon.holds.next_due, daemon.recovery.unsettled.due()));
        earliest(work, self.reload_due)
    }
}

/// The earlier of two optional instants.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The backstop tick, every `period`; a tick missed while an EVAL ran is delayed, not repeated.
fn ticker(period: Duration) -> Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Decides whether a tick may skip its EVAL.
///
/// Why: an idle daemon with a thousand projects spent about 1 % of a core on EVALs that found
/// nothing to do (docs/PERFORMANCE.md, idle measure).
struct TickFilter {
    /// Tells whether anything was committed since it last looked; `None` if it could not be
    /// opened or failed (its connection lost with the database): every tick EVALs until it is
    /// opened again, which is tried at each tick while the database can be reached.
    probe: Option<Arc<Mutex<store::ChangeProbe>>>,
    /// When the last EVAL ran, on both clocks (to notice a step of the wall clock). The wall
    /// clock is read as everything else reads it, `store::now_ms`.
    last_eval: Option<(Instant, store::Millis)>,
}

impl TickFilter {
    async fn open(store: &store::Store) -> TickFilter {
        let probe = match open_probe(store).await {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the change probe; every tick runs an EVAL until it can");
                None
            }
        };
        TickFilter {
            probe,
            last_eval: None,
        }
    }

    /// Whether a tick may skip its EVAL: nothing is waiting in memory (transitions, exited
    /// shims, a backoff), nothing was committed to the database since the last look (by this
    /// daemon, a command that did not nudge, or any other program), the wall clock has not been
    /// stepped (schedules and retries are timed on it), and a full EVAL ran less than
    /// [`FULL_EVAL_AT_LEAST_EVERY`] ago. Everything else that needs an EVAL (shim reports,
    /// nudges, edits, a due retry or occurrence) wakes the loop by itself, not by the tick.
    async fn nothing_changed(&mut self, daemon: &Daemon) -> bool {
        let Some((at, wall)) = self.last_eval else {
            return false;
        };
        if !daemon.runs.pending.is_empty()
            || !daemon.runs.exited.is_empty()
            || !daemon.holds.backoff.is_reset()
            || at.elapsed() >= FULL_EVAL_AT_LEAST_EVERY
        {
            return false;
        }
        let mono = at.elapsed();
        let stepped = match u64::try_from(store::now_ms() - wall) {
            Ok(w) => Duration::from_millis(w).abs_diff(mono) > Duration::from_secs(1),
            // It went back.
            Err(_) => true,
        };
        if stepped {
            return false;
        }
        let Some(probe) = self.probe.clone() else {
            // A new probe's first look says "changed": this tick EVALs either way, and the
            // notices missed while it was gone cannot be lost.
            if !database_down(&daemon.holds) {
                match open_probe(&daemon.setup.store).await {
                    Ok(p) => self.probe = Some(p),
                    Err(e) => tracing::debug!(error = %e, "cannot open the change probe yet"),
                }
            }
            return false;
        };
        let changed = tokio::task::spawn_blocking(move || {
            let mut p = probe.lock().unwrap_or_else(|e| e.into_inner());
            p.changed()
        })
        .await
        .expect("change probe panicked");
        // A probe that cannot read says nothing: EVAL, which reports the error properly. One
        // whose connection is gone is dropped, never read again: a new one is opened once the
        // database can be reached (the server may have restarted).
        match changed {
            Ok(changed) => !changed,
            Err(e) => {
                if e.is_unreachable() {
                    self.probe = None;
                }
                false
            }
        }
    }
}

/// Opens a change probe on `store`, on a blocking thread.
///
/// Errors: the store's, when the database cannot be reached.
async fn open_probe(
    store: &store::Store,
) -> Result<Arc<Mutex<store::ChangeProbe>>, store::StoreError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || store.change_probe())
        .await
        .expect("change_probe panicked")
        .map(|p| Arc::new(Mutex::new(p)))
}
