//! The wall clock can step back — an NTP correction of a host that booted with its clock
//! ahead, an operator's `date -s` — and every instant fleet persisted was written by that
//! clock. This module says how far back counts as a step ([`ahead_of_clock`]); the daemon and
//! the commands apply it to each persisted instant as below.
//!
//! The persisted instants and how each survives a clock that stepped back:
//!
//! - a schedule's cursor (`schedules.cursor`): later than now by more than
//!   [`STEP_BACK_TOLERANCE_MS`] means the clock went back; the schedule restarts from the
//!   clock, logs it, and keeps a record `fleet status` shows
//!   ([`crate::schedule::timetable::due`], `supervisor::schedule::fire_due`). An
//!   occurrence that already has its run is never run again: the unique key (project,
//!   occurrence) refuses the second row;
//! - a queued run's `not_before` (a retry's backoff): counted again from now when its
//!   `enqueued_at` is later than now (`supervisor::clock::rebase_delays`, at each EVAL);
//! - a claim's `started_at`, which `fleet check` uses to give a young claim time to lock:
//!   an age that is negative beyond the tolerance is no age (`supervisor::audit`);
//! - the daemon row's `started_at` (`fleet status`'s uptime): unknown rather than zero.
//!
//! Nothing else persisted is compared with the clock: timeouts and kill grace run on the
//! monotonic clock in the shim, and the daemon's timers on tokio's.

use store::Millis;

/// How much later than now a persisted instant may be before it counts as written by a clock
/// that has since stepped back (milliseconds). Below it, waiting costs at most that long, and a
/// clock a few seconds apart (slewing, another host's) is not mistaken for a step.
pub const STEP_BACK_TOLERANCE_MS: Millis = 10_000;

/// Whether `at`, a persisted instant, is later than `now` by more than the tolerance: the clock
/// that wrote it was ahead of this one.
pub fn ahead_of_clock(at: Millis, now: Millis) -> bool {
    at > now.saturating_add(STEP_BACK_TOLERANCE_MS)
}
