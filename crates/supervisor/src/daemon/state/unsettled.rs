//! The active runs recovery could not settle yet, kept in the daemon's state until they are;
//! settling them again is `daemon/recover.rs`.

use std::time::Duration;

use store::RunId;
use tokio::time::Instant;

use crate::backoff::Backoff;

/// Active runs recovery could not settle: their run files could not be read, or a tombstone
/// could not be written (a full disk, say), or their row holds a value this version cannot read
/// (another program's write). They stay active in the database — counted against
/// every cap through the DB running set, although no slot holds them — and are settled again,
/// with backoff, until they are: a failed read or write may delay a run's fate, never fix it.
#[derive(Debug)]
pub(in crate::daemon) struct Unsettled {
    /// (run, claim token) of each.
    pub(in crate::daemon) runs: Vec<(RunId, u64)>,
    /// When to try again, and the wait that led there (from [`RESETTLE_FIRST`], doubling up to
    /// [`RESETTLE_MAX`]); nothing is due while no run waits.
    pub(in crate::daemon) retry: Backoff<Instant>,
    /// Attempts in a row that left runs unsettled: logged at the 1st, 2nd, 4th, 8th…, so that
    /// a file that stays unreadable does not fill the log every [`RESETTLE_MAX`]. Counted apart
    /// from `retry`'s failures: runs that join after an outage start the wait over, not this
    /// count.
    pub(in crate::daemon) attempts: u64,
}

impl Default for Unsettled {
    fn default() -> Unsettled {
        Unsettled {
            runs: Vec::new(),
            retry: Backoff::new(RESETTLE_FIRST, RESETTLE_MAX),
            attempts: 0,
        }
    }
}

impl Unsettled {
    /// When the next attempt is due, if any run waits for one.
    pub(in crate::daemon) fn due(&self) -> Option<Instant> {
        self.retry.due()
    }
}

/// The first wait before runs recovery could not settle are settled again.
pub(in crate::daemon) const RESETTLE_FIRST: Duration = Duration::from_millis(200);
/// The longest wait between two attempts.
pub(in crate::daemon) const RESETTLE_MAX: Duration = Duration::from_secs(5);
