//! The run state machine: every status a run can have and every transition allowed between them.
//!
//! This is the one place that says which status may follow which. The store refuses any write
//! that is not listed here, so a bug elsewhere cannot, say, resurrect a finished run or mark a
//! queued run `succeeded` without it having started. Backend-neutral: no SQL and no I/O here;
//! each backend maps these names to its own columns.

use std::fmt;
use std::str::FromStr;

/// The status of one run.
///
/// `Starting` and `Running` are the *active* statuses: a run in either counts against every cap,
/// and the database holds at most one active run per project (a partial unique index).
/// The last five are terminal: once written they never change.
///
/// A status describes the world, never an intention: a run is `Cancelled`, `TimedOut` or
/// `Succeeded` only once its process is known to be gone (a run marked ended while its process
/// still lives would stop counting against the caps, and another run of its project could start
/// beside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunStatus {
    /// Waiting in the queue; may be claimed by an EVAL.
    Queued,
    /// Claimed by an EVAL (committed before anything is spawned); its shim may or may not be up.
    Starting,
    /// The shim reported that the command was started.
    Running,
    /// The command exited with status 0.
    Succeeded,
    /// The command exited non-zero, was killed by a signal, or could not be started.
    Failed,
    /// The command outlived the project's `timeout` and was stopped.
    TimedOut,
    /// Cancelled by the operator (or because its project was removed) and known to be gone.
    Cancelled,
    /// The command may have started but its fate is unknown (its shim died without an exit record).
    Lost,
}

/// Every status, in lifecycle order. Used by registers and by `--status` parsing.
pub const ALL_STATUSES: [RunStatus; 8] = [
    RunStatus::Queued,
    RunStatus::Starting,
    RunStatus::Running,
    RunStatus::Succeeded,
    RunStatus::Failed,
    RunStatus::TimedOut,
    RunStatus::Cancelled,
    RunStatus::Lost,
];

/// The transitions the store allows, as (from, to) pairs. Anything not listed is refused with
/// [`crate::StoreError::IllegalTransition`].
///
/// - `Queued → Starting` is the claim; `Queued → Cancelled` a cancel before it started.
/// - `Starting → Queued` is recovery proving the command never started (same attempt).
/// - `Starting → terminal` covers a command that could not be started, or one that ended before
///   its `Running` report was recorded.
pub const TRANSITIONS: &[(RunStatus, RunStatus)] = &[
    (RunStatus::Queued, RunStatus::Starting),
    (RunStatus::Queued, RunStatus::Cancelled),
    (RunStatus::Starting, RunStatus::Queued),
    (RunStatus::Starting, RunStatus::Running),
    (RunStatus::Starting, RunStatus::Succeeded),
    (RunStatus::Starting, RunStatus::Failed),
    (RunStatus::Starting, RunStatus::TimedOut),
    (RunStatus::Starting, RunStatus::Cancelled),
    (RunStatus::Starting, RunStatus::Lost),
    (RunStatus::Running, RunStatus::Succeeded),
    (RunStatus::Running, RunStatus::Failed),
    (RunStatus::Running, RunStatus::TimedOut),
    (RunStatus::Running, RunStatus::Cancelled),
    (RunStatus::Running, RunStatus::Lost),
];

impl RunStatus {
    /// The lowercase name used in the database, on the command line and in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Starting => "starting",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Lost => "lost",
        }
    }

    /// True for `Starting` and `Running`: the statuses that count against caps.
    pub const fn is_active(self) -> bool {
        matches!(self, RunStatus::Starting | RunStatus::Running)
    }

    /// True for the five statuses that never change again.
    pub const fn is_terminal(self) -> bool {
        !matches!(
            self,
            RunStatus::Queued | RunStatus::Starting | RunStatus::Running
        )
    }

    /// Whether the state machine allows `self → to` (see [`TRANSITIONS`]).
    pub fn can_become(self, to: RunStatus) -> bool {
        TRANSITIONS.contains(&(self, to))
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for a string that names no status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown run status {0:?}; expected one of queued, starting, running, succeeded, failed, timed_out, cancelled, lost")]
pub struct UnknownStatus(pub String);

impl FromStr for RunStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL_STATUSES
            .iter()
            .copied()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_string()))
    }
}

/// What made a run: an operator, a schedule occurrence, a retry of an earlier attempt, an
/// operator's rerun of an earlier run, or another project's failure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// `fleet enqueue`.
    #[default]
    Manual,
    /// An occurrence of the project's cron timetable.
    Schedule,
    /// A further attempt after `failed`, `timed_out` or `lost`.
    Retry,
    /// `fleet rerun`: a new run of the same project with the same arguments as an earlier one.
    Rerun,
    /// The `on_failure` project of a project whose run ended `failed`, `timed_out` or `lost`
    /// with no retry left.
    OnFailure,
}

/// Every trigger, for registers that must list them all (the schema's CHECK).
pub const ALL_TRIGGERS: [Trigger; 5] = [
    Trigger::Manual,
    Trigger::Schedule,
    Trigger::Retry,
    Trigger::Rerun,
    Trigger::OnFailure,
];

impl Trigger {
    /// The lowercase name used in the database and in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Trigger::Manual => "manual",
            Trigger::Schedule => "schedule",
            Trigger::Retry => "retry",
            Trigger::Rerun => "rerun",
            Trigger::OnFailure => "on_failure",
        }
    }

    /// Parses the name [`Trigger::as_str`] gives; `None` for any other.
    pub fn parse(s: &str) -> Option<Trigger> {
        ALL_TRIGGERS.iter().copied().find(|t| t.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for st in ALL_STATUSES {
            assert_eq!(st.as_str().parse::<RunStatus>().unwrap(), st);
        }
        assert!("done".parse::<RunStatus>().is_err());
    }

    /// Register check: the transitions agree with the active/terminal split. A terminal status
    /// has no way out; every non-terminal one has a way to a terminal one.
    #[test]
    fn transitions_agree_with_terminality() {
        for (from, to) in TRANSITIONS {
            assert!(
                !from.is_terminal(),
                "{from} is terminal but has an exit to {to}"
            );
            assert_ne!(from, to);
        }
        for st in ALL_STATUSES {
            if !st.is_terminal() {
                assert!(
                    TRANSITIONS.iter().any(|(f, t)| *f == st && t.is_terminal()),
                    "{st} cannot reach an end"
                );
            }
        }
    }
}
