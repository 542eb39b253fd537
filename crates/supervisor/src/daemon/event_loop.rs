//! The loop: wait until something happens, take everything that happened, run one EVAL.
//!
//! It wakes on an [`Event`] (a shim started or exited, a nudge, a reload request, an edit of
//! fleet.toml, a stop signal), on the backstop tick, and when something timed becomes due (a
//! delayed retry, a schedule occurrence, the end of a backoff, a settled edit). Every event
//! already waiting joins the wake-up, so the triggers that arrive during an EVAL are coalesced
//! into exactly one more. A tick alone runs an EVAL only if something may have changed
//! ([`TickFilter`]).
//!
//! This module decides *when* to EVAL, never *what* an EVAL does: it must not touch the
//! database or the slot pool except through the phases ([`Daemon::recover`],
//! [`Daemon::reload_config`], [`Daemon::eval`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::events::{Event, Inbox};
use super::state::Daemon;

/// A tick runs a full EVAL at least this often, even when nothing seems to have changed.
pub const FULL_EVAL_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// How long fleet.toml must stay unchanged after a noticed edit before it is re-read.
pub const RELOAD_SETTLE: Duration = Duration::from_millis(300);

/// Runs the loop until a stop signal, or until the daemon is fenced off
/// ([`Daemon::fenced`]). `reload_due`: reload at this instant (the file changed during setup).
pub(super) async fn run(daemon: &mut Daemon, mut inbox: Inbox, reload_due: Option<Instant>) {
    let mut wake = Wakeup {
        reload_due,
        reload_now: false,
        stop: None,
    };
    let mut ticks = TickFilter::open(&daemon.store).await;
    let mut tick = ticker(daemon.config.tick);
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
            tracing::info!("{signal}: stopping; shims keep running and will be adopted");
            return;
        }
        if wake.reload_due.is_some_and(|at| at <= Instant::now()) {
            wake.reload_due = None;
            wake.reload_now = true;
        }
        if std::mem::take(&mut wake.reload_now) {
            daemon.reload_config().await;
        }
        if tick.period() != daemon.config.tick {
            tick = ticker(daemon.config.tick);
        }
        if daemon
            .backoff
            .is_some_and(|(until, _)| Instant::now() < until)
        {
            continue;
        }
        if !daemon.recovered {
            // Recovery could not read the database at startup: nothing may be claimed before the
            // runs a previous daemon left are adopted or settled.
            daemon.recover().await;
            if !daemon.recovered {
                continue;
            }
        }
        daemon.resettle().await;
        if by_tick && ticks.nothing_changed(daemon).await {
            continue;
        }
        ticks.last_eval = Some((Instant::now(), SystemTime::now()));
        daemon.eval().await;
        if daemon.fenced.is_some() {
            return;
        }
    }
}

/// What the loop itself keeps between wake-ups.
struct Wakeup {
    /// A noticed edit of fleet.toml is reloaded at this instant (see [`RELOAD_SETTLE`]).
    reload_due: Option<Instant>,
    /// A reload was asked for: done before the next EVAL.
    reload_now: bool,
    /// A stop signal arrived (its name).
    stop: Option<&'static str>,
}

impl Wakeup {
    /// Takes one event in: shim reports go to the daemon (for the next EVAL), the rest to the
    /// loop.
    fn note(&mut self, daemon: &mut Daemon, event: Event) {
        match event {
            Event::ShimRunning { run_id, token, pid } => daemon.pending.push(store::Transition {
                run_id,
                token,
                change: store::Change::Running { pid: Some(pid) },
            }),
            Event::ShimExited { run_id, token } => daemon.exited.push((run_id, token)),
            Event::Nudge => {}
            Event::Reload => self.reload_now = true,
            // Every edit pushes the reload back: it happens once the file has been quiet.
            Event::ConfigEdited => self.reload_due = Some(Instant::now() + RELOAD_SETTLE),
            Event::Stop(signal) => self.stop = Some(signal),
        }
    }

    /// When the loop must wake by itself: when delayed work is due (nothing is before a backoff
    /// ends) or a settled edit must be reloaded, whichever comes first.
    fn timer(&self, daemon: &Daemon) -> Option<Instant> {
        let work = match daemon.backoff {
            Some((until, _)) => Some(until),
            None => earliest(daemon.next_due, daemon.unsettled.due()),
        };
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
    /// opened (every tick EVALs).
    probe: Option<Arc<Mutex<store::ChangeProbe>>>,
    /// When the last EVAL ran, on both clocks (to notice a step of the wall clock).
    last_eval: Option<(Instant, SystemTime)>,
}

impl TickFilter {
    async fn open(store: &store::Store) -> TickFilter {
        let store = store.clone();
        let probe = match tokio::task::spawn_blocking(move || store.change_probe())
            .await
            .expect("change_probe panicked")
        {
            Ok(p) => Some(Arc::new(Mutex::new(p))),
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the change probe; every tick runs an EVAL");
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
    async fn nothing_changed(&self, daemon: &Daemon) -> bool {
        let Some((at, wall)) = self.last_eval else {
            return false;
        };
        if !daemon.pending.is_empty()
            || !daemon.exited.is_empty()
            || daemon.backoff.is_some()
            || at.elapsed() >= FULL_EVAL_AT_LEAST_EVERY
        {
            return false;
        }
        let mono = at.elapsed();
        let stepped = match SystemTime::now().duration_since(wall) {
            Ok(w) => w.abs_diff(mono) > Duration::from_secs(1),
            Err(_) => true,
        };
        if stepped {
            return false;
        }
        let Some(probe) = self.probe.clone() else {
            return false;
        };
        let changed = tokio::task::spawn_blocking(move || {
            let mut p = probe.lock().unwrap_or_else(|e| e.into_inner());
            p.changed()
        })
        .await
        .expect("change probe panicked");
        // A probe that cannot read says nothing: EVAL, which reports the error properly.
        matches!(changed, Ok(false))
    }
}
