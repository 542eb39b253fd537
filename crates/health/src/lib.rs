//! The loop's heartbeat: when the EVAL loop last completed a turn, and whether that is recent
//! enough for the daemon to count as evaluating.
//!
//! A daemon that holds its state directory but whose loop no longer turns (stopped with
//! SIGSTOP, wedged on a database that stays busy, a bug) still looks alive to a pid check and to
//! the daemon lock: only the loop itself can say it is working. It records a *turn* each time
//! it completes an EVAL or a tick finds nothing to do (an idle daemon skips its EVALs, and that
//! is health too). Everything that reports health reads the same record: `fleet status` over
//! the control socket, the HTTP `/healthz`, the systemd watchdog.
//!
//! A daemon whose database cannot be reached counts as unhealthy too ([`Verdict::Stuck`], exit
//! status 1 of `fleet status`, 503 from `/healthz`), whatever its loop does: it keeps its shims
//! running and retries, but it can neither claim nor record an end, which is what an operator
//! or a load balancer needs to hear. The reason names the outage and since when.
//!
//! The record is a few atomics, written by the loop and read by any task or thread, so reading it
//! never waits for the loop (a stuck loop must not make the health check hang with it).
//!
//! Its writer is the daemon's loop; its readers are the daemon's control socket and watchdog,
//! and the HTTP listener, which must not depend on the daemon. So the record is a crate of its
//! own, which depends on nothing of fleet's but `store`'s instant type.
//!
//! # Layout
//!
//! This file alone: [`Health`] (the record), [`Verdict`] (what it says at an instant) and
//! [`STUCK_AFTER_TICKS`].

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use store::Millis;

/// How many ticks may pass without a turn before the loop counts as stuck.
pub const STUCK_AFTER_TICKS: u32 = 3;

/// The heartbeat of one daemon's loop. Shared (in an `Arc`) between the loop, which writes it,
/// and whatever reports health, which reads it.
#[derive(Debug)]
pub struct Health {
    /// When the daemon started, in [`Millis`] (UTC).
    started_at: Millis,
    /// When the loop last completed a turn, in [`Millis`]; 0 before the first.
    last_turn: AtomicI64,
    /// The tick in force, in milliseconds (a reload may change it).
    tick_ms: AtomicU64,
    /// Since when the database cannot be reached, in [`Millis`]; 0 while it can.
    unreachable_since: AtomicI64,
}

/// What [`Health::verdict`] finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The loop completed a turn within [`STUCK_AFTER_TICKS`] ticks (or the daemon started less
    /// than that long ago and is still recovering).
    Evaluating {
        /// Milliseconds since the last turn (`None`: no turn yet, still starting).
        since_last_turn_ms: Option<u64>,
    },
    /// No turn for longer than [`STUCK_AFTER_TICKS`] ticks.
    Stuck {
        /// One line saying since when, for `fleet status` and `/healthz`.
        reason: String,
    },
}

impl Health {
    /// A heartbeat for a daemon started at `now` (milliseconds since the Unix epoch, UTC) whose
    /// loop ticks every `tick`.
    pub fn new(tick: Duration, now: Millis) -> Health {
        Health {
            started_at: now,
            last_turn: AtomicI64::new(0),
            tick_ms: AtomicU64::new(duration_ms(tick)),
            unreachable_since: AtomicI64::new(0),
        }
    }

    /// The loop completed a turn at `now`.
    pub fn turn(&self, now: Millis) {
        self.last_turn.store(now, Ordering::Relaxed);
    }

    /// The tick in force changed (a reload).
    pub fn set_tick(&self, tick: Duration) {
        self.tick_ms.store(duration_ms(tick), Ordering::Relaxed);
    }

    /// The database cannot be reached since `since` (milliseconds since the Unix epoch, UTC), or
    /// (`None`) it can again. While it cannot, [`Health::verdict`] is [`Verdict::Stuck`].
    pub fn set_database_unreachable(&self, since: Option<Millis>) {
        // 0 is "reachable": a clock at the epoch itself still records an outage.
        let at = since.map_or(0, |t| t.max(1));
        self.unreachable_since.store(at, Ordering::Relaxed);
    }

    /// The tick in force.
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms.load(Ordering::Relaxed))
    }

    /// When the daemon started (milliseconds since the Unix epoch, UTC).
    pub fn started_at(&self) -> Millis {
        self.started_at
    }

    /// When the loop last completed a turn (milliseconds since the Unix epoch, UTC), if it has.
    pub fn last_turn(&self) -> Option<Millis> {
        match self.last_turn.load(Ordering::Relaxed) {
            0 => None,
            at => Some(at),
        }
    }

    /// Whether the loop counts as evaluating at `now`: the database can be reached, and the
    /// loop completed a turn (or started) less than [`STUCK_AFTER_TICKS`] ticks ago. A wall
    /// clock stepped back counts as recent.
    pub fn verdict(&self, now: Millis) -> Verdict {
        let down = self.unreachable_since.load(Ordering::Relaxed);
        if down != 0 {
            let since = u64::try_from(now - down).unwrap_or(0);
            return Verdict::Stuck {
                reason: format!(
                    "the database cannot be reached (for {}): the daemon claims nothing and \
                     retries; its shims keep running and their exits are recorded once it is back",
                    humantime::format_duration(Duration::from_millis(since - since % 1000)),
                ),
            };
        }
        let limit = self.tick_ms.load(Ordering::Relaxed) * u64::from(STUCK_AFTER_TICKS);
        let last = self.last_turn();
        let since = u64::try_from(now - last.unwrap_or(self.started_at)).unwrap_or(0);
        if since <= limit {
            return Verdict::Evaluating {
                since_last_turn_ms: last.map(|_| since),
            };
        }
        let what = match last {
            Some(_) => "completed no EVAL",
            None => "has not completed its first EVAL",
        };
        Verdict::Stuck {
            reason: format!(
                "the daemon's loop {what} for {} (more than {STUCK_AFTER_TICKS} ticks of {})",
                humantime::format_duration(Duration::from_millis(since - since % 1000)),
                humantime::format_duration(self.tick()),
            ),
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_within_three_ticks_is_evaluating_and_past_it_stuck() {
        let h = Health::new(Duration::from_secs(1), 10_000);
        // Starting: no turn yet, but within three ticks of the start.
        assert_eq!(
            h.verdict(12_000),
            Verdict::Evaluating {
                since_last_turn_ms: None
            }
        );
        assert!(matches!(h.verdict(13_001), Verdict::Stuck { .. }));
        h.turn(20_000);
        assert_eq!(
            h.verdict(23_000),
            Verdict::Evaluating {
                since_last_turn_ms: Some(3_000)
            }
        );
        let Verdict::Stuck { reason } = h.verdict(25_500) else {
            panic!("five ticks without a turn must be stuck");
        };
        assert!(reason.contains("for 5s"), "{reason}");
        // A longer tick after a reload moves the limit.
        h.set_tick(Duration::from_secs(10));
        assert!(matches!(h.verdict(25_500), Verdict::Evaluating { .. }));
        // A clock stepped back is not a stuck loop.
        assert!(matches!(h.verdict(1_000), Verdict::Evaluating { .. }));
    }

    #[test]
    fn an_unreachable_database_is_unhealthy_until_it_is_back() {
        let h = Health::new(Duration::from_secs(1), 10_000);
        h.turn(10_000);
        h.set_database_unreachable(Some(10_000));
        // Even with a recent turn.
        let Verdict::Stuck { reason } = h.verdict(12_500) else {
            panic!("an unreachable database must be unhealthy");
        };
        assert!(
            reason.contains("database cannot be reached (for 2s)"),
            "{reason}"
        );
        h.set_database_unreachable(None);
        assert!(matches!(h.verdict(12_500), Verdict::Evaluating { .. }));
    }
}
