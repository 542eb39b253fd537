//! How much history and log a project keeps: `keep_runs`, `keep_for` (pruning of ended runs)
//! and `max_log_size` (the bound on one run's log). Plain data; validated in `validate`.

use std::time::Duration;

/// `keep_runs` when not set anywhere: the newest 100 ended runs of each project.
pub const DEFAULT_KEEP_RUNS: u32 = 100;
/// `keep_for` when not set anywhere: 30 days.
pub const DEFAULT_KEEP_FOR: Duration = Duration::from_secs(30 * 86_400);
/// `max_log_size` when not set anywhere: 64 MiB.
pub const DEFAULT_MAX_LOG_SIZE: u64 = 64 << 20;
/// How `keep_runs` and `keep_for` are switched off in fleet.toml.
pub const OFF: &str = "off";

/// The retention settings in force for one project (its own keys, else the top level's, else
/// the defaults), or the top level's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// The newest this many ended runs of the project are kept (at least 1); `None` (`"off"`):
    /// no limit by count.
    pub keep_runs: Option<u32>,
    /// Ended runs that finished longer ago than this are pruned; `None` (`"off"`): no limit by
    /// age.
    pub keep_for: Option<Duration>,
    /// The most bytes of output a run's log holds (at least 1 KiB); older output is dropped,
    /// and a marker line says how much.
    pub max_log_size: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_runs: Some(DEFAULT_KEEP_RUNS),
            keep_for: Some(DEFAULT_KEEP_FOR),
            max_log_size: DEFAULT_MAX_LOG_SIZE,
        }
    }
}

impl Retention {
    /// Whether pruning applies at all (one of `keep_runs`, `keep_for` is set).
    pub fn prunes(&self) -> bool {
        self.keep_runs.is_some() || self.keep_for.is_some()
    }
}
