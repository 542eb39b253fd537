//! The EVAL's check of queued runs' delays against a wall clock that stepped back: how far back
//! counts as a step, and how every other persisted instant survives one, is
//! [`config::clock`].

use config::clock::STEP_BACK_TOLERANCE_MS;
use store::{Millis, Store, StoreError};

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
