//! The wall clock can step back — an NTP correction of a host that booted with its clock
//! ahead, an operator's `date -s` — and every instant fleet persisted was written by that
//! clock. This module says how far back counts as a step, and handles the persisted instants
//! that are not schedule cursors (those are the timetable's: `schedule::timetable::due`).
//!
//! The persisted instants and how each survives a clock that stepped back:
//!
//! - a schedule's cursor (`schedules.cursor`): later than now by more than
//!   [`STEP_BACK_TOLERANCE_MS`] means the clock went back; the schedule restarts from the
//!   clock, logs it, and keeps a record `fleet status` shows (`schedule::timetable::due`,
//!   `schedule::fire_due`). An occurrence that already has its run is never run again:
//!   the unique key (project, occurrence) refuses the second row;
//! - a queued run's `not_before` (a retry's backoff): counted again from now when its
//!   `enqueued_at` is later than now ([`rebase_delays`]);
//! - a claim's `started_at`, which `fleet check` uses to give a young claim time to lock:
//!   an age that is negative beyond the tolerance is no age ([`crate::audit`]);
//! - the daemon row's `started_at` (`fleet status`'s uptime): unknown rather than zero.
//!
//! Nothing else persisted is compared with the clock: timeouts and kill grace run on the
//! monotonic clock in the shim, and the daemon's timers on tokio's.

use store::{Millis, Store, StoreError};

/// How much later than now a persisted instant may be before it counts as written by a clock
/// that has since stepped back (milliseconds). Below it, waiting costs at most that long, and a
/// clock a few seconds apart (slewing, another host's) is not mistaken for a step.
pub const STEP_BACK_TOLERANCE_MS: Millis = 10_000;

/// Whether `at`, a persisted instant, is later than `now` by more than the tolerance: the clock
/// that wrote it was ahead of this one.
pub fn ahead_of_clock(at: Millis, now: Millis) -> bool {
    at > now.saturating_add(STEP_BACK_TOLERANCE_MS)
}

/// The EVAL's check of queued runs' delays (before the queue heads are read): a delay set by a
/// clock that has since stepped back is counted again from `now`, and each such run is logged.
/// A read of the delayed queued runs alone when there is none.
///
/// Errors: the store's (busy: the same check runs at the next EVAL; fenced).
pub fn rebase_delays(store: &Store, epoch: i64, now: Millis) -> Result<(), StoreError> {
    for d in store.rebase_delays(epoch, now, STEP_BACK_TOLERANCE_MS)? {
        tracing::error!(
            run = d.run_id,
            project = %d.project,
            not_before_was = %store::rfc3339(d.not_before_was),
            not_before = %store::rfc3339(d.not_before),
            "the clock went back: this queued run's delay was set by a clock ahead of this one; \
             counted again from now"
        );
    }
    Ok(())
}
