//! An outage of the database in progress, as the daemon's state keeps it: what the loop does
//! about one is `daemon/outage.rs`.

use tokio::time::Instant;

/// An outage in progress.
#[derive(Debug)]
pub(in crate::daemon) struct Outage {
    /// When the first failure was seen.
    pub(in crate::daemon) since: Instant,
    /// How many tries failed so far (the first included).
    pub(in crate::daemon) tries: u32,
}
