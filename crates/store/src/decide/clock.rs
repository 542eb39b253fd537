//! What rebasing a delay written by a clock that has since stepped back writes.
//!
//! A queued run's `not_before` (a retry's backoff) is an instant of the clock that wrote it. If
//! that clock was ahead and has been corrected, the instant lies far beyond the delay it was
//! meant to be, and the run would wait for as long as the clock was wrong. The run's
//! `enqueued_at`, written by the same clock, gives it away: it is later than now. The backend
//! finds such runs and writes what [`rebase`] says; nothing here reads a clock.

use crate::Millis;

/// The delay of a run queued at `enqueued_at` not before `not_before`, counted again from
/// `now` (all ms UTC): its new `not_before`, and the note appended to its `reason`. A delay
/// that was negative counts as none.
pub(crate) fn rebase(not_before: Millis, enqueued_at: Millis, now: Millis) -> (Millis, String) {
    let delay = (not_before - enqueued_at).max(0);
    let note = format!(
        "delay counted again from {}: the clock went back after it was set (it said {})",
        crate::rfc3339(now),
        crate::rfc3339(not_before)
    );
    (now.saturating_add(delay), note)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_is_kept_and_counted_from_now() {
        let (at, note) = rebase(10_000 + 3_000, 10_000, 500);
        assert_eq!(at, 3_500);
        assert!(note.starts_with("delay counted again from 1970-01-01T00:00:00.500Z"));
    }

    #[test]
    fn a_negative_delay_counts_as_none() {
        assert_eq!(rebase(1_000, 2_000, 500).0, 500);
    }
}
