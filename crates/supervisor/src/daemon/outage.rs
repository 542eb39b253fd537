//! The database going away while the daemon runs (a PostgreSQL server stopped, restarted or
//! cut off by the network): what the loop does until it is back.
//!
//! An operation that fails with [`StoreError::is_unreachable`] starts an outage. Meanwhile the
//! daemon claims nothing (every EVAL and recovery fails before its claim), keeps its shims
//! running and follows them as ever, keeps the transitions their exits call for in
//! [`Supervised::pending`](super::state::Supervised::pending) (decided from the run files, written once the database is back: an exit
//! status is never lost, and the state machine refuses a second write of it), and tries again
//! after a pause that doubles from [`FIRST_PAUSE`] up to [`MAX_PAUSE`]. It logs one line when the
//! outage starts and one when it ends, never one per try, and health reports it
//! ([`health::Health::set_database_unreachable`]).
//!
//! While it is down, the loop skips the epoch read of its state-directory check (the inode
//! checks go on), pruning, and the change probe, and feeds the systemd watchdog at its ticks
//! (alive and waiting, not wedged); a probe whose connection failed is dropped, and a new one
//! opened once the database answers (its first look says "changed").
//!
//! When the database is back (the first operation that gets through), the runs it holds as
//! active under this daemon's epoch that no slot, pending transition or unsettled run accounts
//! for are settled from their run files as recovery does ([`reconcile`](super::recover::reconcile), after the next
//! EVAL that wrote everything pending): a claim whose commit was lost with the connection may
//! have been committed after all, with no shim to run it (no files: never started, requeued).
//!
//! This module decides the pauses, the log lines and the health flag; it must never write to the
//! database, start or stop a shim, or end the loop (nothing an outage does is a reason to exit).

use std::time::Duration;

use store::{now_ms, StoreError};
use tokio::time::Instant;

use health::Health;

use super::state::outage::Outage;
use super::state::{Holds, RecoveryState};

/// The first pause after the database could not be reached; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// The longest pause between two tries while the database cannot be reached.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// Called after a failed operation of the loop (`what`: which one, for the log). Returns
/// false, doing nothing, when `err` is not a lost connection; otherwise starts or continues
/// the outage and sets the pause before the next try in [`Holds::backoff`](super::state::Holds::backoff).
pub(super) fn database_unreachable(
    holds: &mut Holds,
    health: &Health,
    err: &StoreError,
    what: &str,
) -> bool {
    if !err.is_unreachable() {
        return false;
    }
    // The back-off is the one a failed EVAL or recovery sets too: the pause doubles whatever
    // wait the last failure left, but is never shorter than the first pause (a wait left by
    // something else may be shorter than half of it: it starts over at the first pause).
    holds.backoff.set_limits(FIRST_PAUSE, MAX_PAUSE);
    match &mut holds.outage {
        Some(outage) => {
            outage.tries += 1;
            if holds
                .backoff
                .wait()
                .is_some_and(|w| w.saturating_mul(2) < FIRST_PAUSE)
            {
                holds.backoff.reset();
            }
            let wait = holds.backoff.fail(Instant::now());
            tracing::debug!(error = %err, what, tries = outage.tries, retry_in_secs = wait.as_secs(), "the database still cannot be reached");
        }
        None => {
            tracing::warn!(
                error = %err,
                what,
                "the database cannot be reached: claiming nothing until it is back; the shims \
                 keep running and their exits are reported then; retrying with a pause growing \
                 from {FIRST_PAUSE:?} to {MAX_PAUSE:?}"
            );
            holds.outage = Some(Outage {
                since: Instant::now(),
                tries: 1,
            });
            health.set_database_unreachable(Some(now_ms()));
            holds.backoff.reset();
            holds.backoff.fail(Instant::now());
        }
    }
    true
}

/// Called after an operation of the loop reached the database: ends the outage, if one was
/// in progress, says so once, and asks for the reconciliation of lost claims. `unwritten`
/// is what was waiting to be written when the operation began (for the log).
pub(super) fn database_reachable(
    holds: &mut Holds,
    health: &Health,
    recovery: &mut RecoveryState,
    unwritten: usize,
) {
    let Some(outage) = holds.outage.take() else {
        return;
    };
    tracing::info!(
        down_for = %humantime::format_duration(Duration::from_secs(outage.since.elapsed().as_secs())),
        tries = outage.tries,
        unwritten,
        "the database is reachable again; writing what happened meanwhile"
    );
    health.set_database_unreachable(None);
    recovery.reconcile_due = true;
}

/// True while the database is known to be unreachable: the loop skips what would only wait
/// on it again (the epoch check, pruning, the change probe) until the next try.
pub(super) fn database_down(holds: &Holds) -> bool {
    holds.outage.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn unreachable() -> StoreError {
        StoreError::Unreachable {
            context: "database",
            source: "connection refused".into(),
        }
    }

    /// An outage starts at the first failure that is a lost connection (health says so), its
    /// pause doubles from a second up to thirty, and it ends (health clear, reconciliation
    /// asked for) at the first operation that gets through. Any other error is not an outage.
    #[test]
    fn an_outage_pauses_doubling_and_ends_with_a_reconciliation() {
        let mut holds = Holds::new();
        let health = Health::new(Duration::from_secs(1), 0);
        let mut recovery = RecoveryState::default();
        let busy = StoreError::Backend {
            context: "database",
            busy: true,
            refused: false,
            source: "database is locked".into(),
        };
        assert!(!database_unreachable(&mut holds, &health, &busy, "EVAL"));
        assert!(!database_down(&holds));

        assert!(database_unreachable(
            &mut holds,
            &health,
            &unreachable(),
            "EVAL"
        ));
        assert!(database_down(&holds));
        assert!(matches!(health.verdict(1), health::Verdict::Stuck { .. }));
        assert_eq!(holds.backoff.wait(), Some(FIRST_PAUSE));
        for _ in 0..10 {
            database_unreachable(&mut holds, &health, &unreachable(), "EVAL");
        }
        assert_eq!(holds.backoff.wait(), Some(MAX_PAUSE));
        assert_eq!(holds.outage.as_ref().map(|o| o.tries), Some(11));

        database_reachable(&mut holds, &health, &mut recovery, 3);
        assert!(!database_down(&holds));
        assert!(recovery.reconcile_due);
        assert!(!matches!(health.verdict(1), health::Verdict::Stuck { .. }));
        // Reachable while no outage was in progress: nothing to reconcile.
        recovery.reconcile_due = false;
        database_reachable(&mut holds, &health, &mut recovery, 0);
        assert!(!recovery.reconcile_due);
    }
}
