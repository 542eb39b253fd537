//! The names and modes of the files in `<state_dir>/runs/` (see the crate documentation's
//! table); a segment's name is [`crate::slot`]'s.

/// Name of the folder under the state directory that holds every run's files.
pub const RUNS_DIR: &str = "runs";
/// Suffix of a run's overflow file, `runs/<id>.more`: the records that no longer fit in its
/// slot, appended.
pub const MORE_SUFFIX: &str = ".more";
/// Suffix of a run's log, `runs/<id>.log`.
pub const LOG_SUFFIX: &str = ".log";
/// Suffix of a log compaction's side file, after the log's own name.
pub const COMPACTING_SUFFIX: &str = ".compacting";
/// Mode of `runs/`: the state directory is private (run logs and records are the operator's
/// business alone).
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file of a run.
pub const FILE_MODE: u32 = 0o600;
