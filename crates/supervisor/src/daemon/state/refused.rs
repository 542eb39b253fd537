//! What the database refused, waiting in the daemon's state to be tried again: a transition
//! refused even written alone ([`Refused`]), and the runs whose claim it refused
//! ([`ClaimBackoff`]). Both wait 1 s, doubled at each refusal in a row up to a minute. Writing
//! what was refused, and when to try it again, is `daemon/refused.rs`.

use std::collections::HashMap;
use std::time::Duration;

use store::{ClaimRefusal, Millis, RunId, Transition};
use tokio::time::Instant;

use crate::backoff::Backoff;

/// A transition the database refused even written alone, waiting to be tried again.
pub(in crate::daemon) struct Refused {
    /// The transition, as decided.
    pub(in crate::daemon) transition: Transition,
    /// Not tried again before it is due; one failure per refusal in a row.
    pub(in crate::daemon) retry: Backoff<Instant>,
}

/// The first wait before a refused transition is tried again; it doubles with each refusal in
/// a row, up to [`REFUSED_RETRY_MAX`]. Why: an end the database refuses is a problem only an
/// operator can fix (the log names the run and the error); tried at every EVAL, it would log
/// an ERROR at every tick.
pub(in crate::daemon) const REFUSED_RETRY_FIRST: Duration = Duration::from_secs(1);

/// The longest wait between two tries of a refused transition.
pub(in crate::daemon) const REFUSED_RETRY_MAX: Duration = Duration::from_secs(60);

/// The back-off of a run refused for the first time, transition or claim.
pub(in crate::daemon) const fn refused_backoff<I: crate::backoff::Moment>() -> Backoff<I> {
    Backoff::new(REFUSED_RETRY_FIRST, REFUSED_RETRY_MAX)
}

/// Runs whose claim the database refused, held out of the packing until their wait is over:
/// the first wait is 1 s, doubled at each refusal in a row up to 60 s, as for refused
/// transitions. Kept by the daemon across EVALs and
/// handed to [`crate::daemon::eval_blocking`]; times are milliseconds since the Unix epoch (UTC), the
/// EVAL's own clock.
///
/// A back-off per run, not one for all: each run's refusals in a row are its own, and a run is
/// forgotten (its next refusal starts over) once its wait is over and a claim did not refuse it
/// again.
#[derive(Debug, Default)]
pub struct ClaimBackoff {
    /// Run → its back-off: not asked for before it is due.
    held: HashMap<RunId, Backoff<Millis>>,
}

impl ClaimBackoff {
    /// Whether `run` is held out of the packing at `now`.
    pub fn holds(&self, run: RunId, now: Millis) -> bool {
        self.held.get(&run).is_some_and(|b| !b.is_due(now))
    }

    /// The earliest instant after `now` a held run may be asked for again: an EVAL is due
    /// then. A wait already over is not one (the run is a candidate again): counting it would
    /// make every EVAL due at once, a spin.
    pub fn next_due(&self, now: Millis) -> Option<Millis> {
        self.held
            .values()
            .filter_map(Backoff::due)
            .filter(|due| *due > now)
            .min()
    }

    /// How many runs are held at `now` (their wait not over).
    pub fn held_at(&self, now: Millis) -> usize {
        self.held.values().filter(|b| !b.is_due(now)).count()
    }

    /// How many runs are remembered: held, or held until lately and not asked for since (their
    /// next refusal doubles the wait).
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no run is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// After a claim at `now`: each run in `refused` waits twice as long as before (the first
    /// wait if it was not held), and the runs whose wait was over and that were not refused
    /// again are forgotten (claimed, or not picked: their next refusal starts over). Returns
    /// each refusal with the wait it now has, for the log.
    pub fn settle(
        &mut self,
        refused: Vec<ClaimRefusal>,
        now: Millis,
    ) -> Vec<(ClaimRefusal, Duration)> {
        let out: Vec<(ClaimRefusal, Duration)> = refused
            .into_iter()
            .map(|r| {
                let held = self.held.entry(r.run_id).or_insert(refused_backoff());
                let wait = held.fail(now);
                (r, wait)
            })
            .collect();
        // The refused ones were just given a wait ahead of `now`.
        self.held.retain(|_, b| !b.is_due(now));
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use store::ClaimRefusal;

    use super::ClaimBackoff;

    fn refusal(run_id: i64) -> ClaimRefusal {
        ClaimRefusal {
            run_id,
            reason: "no".into(),
        }
    }

    /// A run refused again and again waits 1 s, 2 s, 4 s… up to a minute, and is held only
    /// until its wait is over; a run not refused again once its wait is over is forgotten, so
    /// its next refusal starts over at 1 s.
    #[test]
    fn a_refused_claim_waits_longer_each_time_and_is_forgotten_once_asked_for() {
        let mut b = ClaimBackoff::default();
        let mut now = 1_000_000;
        let mut waits = Vec::new();
        for _ in 0..9 {
            let out = b.settle(vec![refusal(7)], now);
            let wait = out[0].1;
            waits.push(wait.as_secs());
            assert!(b.holds(7, now + wait.as_millis() as i64 - 1));
            assert!(!b.holds(7, now + wait.as_millis() as i64));
            assert!(!b.holds(8, now), "only the refused run is held");
            assert_eq!(b.next_due(now), Some(now + wait.as_millis() as i64));
            assert_eq!(b.held_at(now), 1);
            let over = now + wait.as_millis() as i64;
            assert_eq!(b.next_due(over), None, "a wait already over is no wake-up");
            assert_eq!(b.held_at(over), 0);
            now += wait.as_millis() as i64;
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);

        // Its wait over, a claim at which it is not refused (claimed, or not picked) forgets it;
        // another run refused meanwhile is held.
        assert_eq!(b.len(), 1);
        b.settle(vec![refusal(9)], now);
        assert_eq!(b.len(), 1, "run 9 waits, run 7 was forgotten");
        assert!(b.holds(9, now) && !b.holds(7, now));
        assert_eq!(
            b.settle(vec![refusal(7)], now)[0].1,
            Duration::from_secs(1),
            "a new refusal of a forgotten run starts over"
        );
    }
}
