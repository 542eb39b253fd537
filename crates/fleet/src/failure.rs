//! How a command fails: [`Failure`] (an exit status and a one-line message), its constructors
//! for each kind of failure the commands share, and the [`Result`] every command returns.
//!
//! Exit statuses (docs/REFERENCE.md): 1 the action failed, 2 bad usage or bad input, 3 no
//! daemon runs (`status` only), [`READER_GONE`] the reader of stdout left; a wait exits as the
//! command it waited for did. `main` prints the message as `fleet: MESSAGE` on stderr.

use config::ConfigErrors;
use serde_json::json;
use store::{RunId, StoreError};
use supervisor::statedir::StateDirError;

/// Exit status of a command whose standard output was closed by its reader: 128 + SIGPIPE.
pub const READER_GONE: u8 = 141;

/// What every command returns.
pub type Result<T> = std::result::Result<T, Failure>;

/// A failure with its exit status: 1 the action failed, 2 bad usage or bad input, 3 no daemon
/// runs (`status` only), [`READER_GONE`] the reader of stdout left.
#[derive(Debug)]
pub struct Failure {
    /// 1, 2, 3 or [`READER_GONE`].
    pub code: u8,
    /// One line naming what was wrong; empty when the reader of stdout left (nothing to say).
    pub message: String,
    /// What the command printed on stdout already reports the problem (a `--json` report that
    /// holds it): no error object is added to it.
    pub reported: bool,
}

impl Failure {
    /// Bad input: exit 2.
    pub fn input(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 2,
            message: message.to_string(),
            reported: false,
        }
    }

    /// The action failed: exit 1.
    pub fn action(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 1,
            message: message.to_string(),
            reported: false,
        }
    }

    /// The reader of stdout left: stop, say nothing, exit [`READER_GONE`].
    pub fn reader_gone() -> Failure {
        Failure {
            code: READER_GONE,
            message: String::new(),
            reported: false,
        }
    }

    /// Whether this is [`Failure::reader_gone`].
    pub fn is_reader_gone(&self) -> bool {
        self.code == READER_GONE
    }

    /// The same failure, marked as already reported on stdout.
    pub fn reported(mut self) -> Failure {
        self.reported = true;
        self
    }

    /// An invalid config: exit 2, with its first error and how many more.
    pub fn invalid_config(errors: &ConfigErrors) -> Failure {
        let first = errors.0.first().map(|e| e.to_string()).unwrap_or_default();
        let more = errors.0.len().saturating_sub(1);
        if more > 0 {
            Failure::input(format!("{first} (and {more} more; run `fleet validate`)"))
        } else {
            Failure::input(first)
        }
    }

    /// A state directory that cannot be used: exit 1 when the system refused this user
    /// (permission denied: the action failed, the input was fine), the database server cannot
    /// be reached, or it refused to bring the schema up to date (this role may not); 2
    /// otherwise (a state_dir that is not a directory, a database written by a newer fleet).
    pub fn state_dir(e: StateDirError) -> Failure {
        let refused_by_server = matches!(
            &e,
            StateDirError::Store(StoreError::Connect { .. } | StoreError::Migrate { .. })
        );
        if e.is_permission_denied() || refused_by_server {
            Failure::action(e)
        } else {
            Failure::input(e)
        }
    }

    /// A run id the database does not know (or no database at all): exit 2.
    pub fn unknown_run(id: RunId) -> Failure {
        Failure::input(format!("unknown run id {id}"))
    }

    /// A run read by its id that could not be read: [`Failure::unknown_run`] when the database
    /// does not know it, else the action failed (exit 1).
    pub fn run_not_read(id: RunId, e: StoreError) -> Failure {
        match e {
            StoreError::UnknownRun(_) => Failure::unknown_run(id),
            other => Failure::action(other),
        }
    }
}

/// A prune failing midway: exit 1, naming the database or the run's file.
impl From<supervisor::prune::PruneError> for Failure {
    fn from(e: supervisor::prune::PruneError) -> Failure {
        Failure::action(e)
    }
}

/// What every `--json` command prints on stdout when it fails without a report of its own:
/// `{"error": MESSAGE}`, the message its stderr line carries.
pub fn error_json(message: &str) -> String {
    json!({ "error": message }).to_string()
}
