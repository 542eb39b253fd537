//! What a shim does with its claim once it holds the run's lock, from what the run's files
//! hold ([`RunFiles::before_start`](runrecord::RunFiles::before_start)): start the command, or
//! not. Pure: the shim (`supervise.rs`) and the simulator's shims (`crates/sim`) both decide
//! through [`decide`], and write what it says.

use runrecord::{BeforeStart, ExitRecord, Outcome};

/// What the shim of claim `token` does.
#[derive(Debug)]
pub enum Decision {
    /// Recovery gave this claim up (its tombstone is there): nothing is started or written.
    GivenUp,
    /// Another claim's command started: this claim starts nothing, and ends with `exit` (that
    /// command's end repeated when the files hold it, else `already_started`). `why` is for the
    /// log.
    NotAgain {
        /// The record to write.
        exit: ExitRecord,
        /// Why, in words.
        why: String,
    },
    /// Start the command. `history`: the claims whose `started` records came before, then
    /// this one, for the `started` record. `unreadable_earlier`: the earlier `started` record
    /// could not be read (its claims are missing from `history`; said in the log).
    Start {
        /// The claims of the `started` record's history.
        history: Vec<u64>,
        /// What could not be read of the earlier record, if anything.
        unreadable_earlier: Option<std::io::Error>,
    },
}

/// The decision of the shim of claim `token` of `run`, given what its files hold (`before`),
/// at `now` (RFC 3339, for a record written now).
///
/// A `started` record of another claim means the command was started once already: a claim is
/// requeued only when its command provably never started, so no earlier claim can
/// legitimately have one. It comes from a database restored from an older backup that still
/// queued the run, from another program that queued it again while it ran, or from another
/// install's files with this run's id. Starting again would start one attempt twice: the claim
/// ends instead. When the files also hold how that earlier start ended, this claim's end
/// repeats it (the run ends as its command did, with no retry: one may have run already, under
/// an id the database no longer knows); otherwise the run ends `lost`.
pub fn decide(run: i64, token: u64, before: BeforeStart, now: &str) -> Decision {
    if before.tombstoned {
        return Decision::GivenUp;
    }
    match before.earlier {
        Ok(Some(old)) if old.token != token => match before.earlier_end {
            Some(ended) => Decision::NotAgain {
                why: format!(
                    "not started: its files say its command was already started, by claim {} at {}, \
                     and ended ({}): the run ends as it did (a database restored from an older backup, or a write by another program that queued it again?)",
                    old.token,
                    old.at,
                    describe_end(&ended)
                ),
                exit: ExitRecord {
                    token,
                    repeats: Some(old.token),
                    ..ended
                },
            },
            None => {
                let why = format!(
                    "not started: run {run}'s files say its command was already started, by claim {} at {} \
                     (a database restored from an older backup, a write by another program that queued it again, \
                     or another install's files with this run's id)",
                    old.token, old.at
                );
                Decision::NotAgain {
                    exit: not_started(token, Outcome::AlreadyStarted, why.clone(), now),
                    why,
                }
            }
        },
        Ok(Some(old)) => {
            // Its own token (a claim's started record read again): its history goes on.
            let mut history = if old.history.is_empty() {
                vec![old.token]
            } else {
                old.history
            };
            history.push(token);
            Decision::Start {
                history,
                unreadable_earlier: None,
            }
        }
        Ok(None) => Decision::Start {
            history: vec![token],
            unreadable_earlier: None,
        },
        // The history is for `fleet check`; an unreadable earlier record must not stop this
        // claim, but it is said, since the history it would have carried is now incomplete.
        Err(e) => Decision::Start {
            history: vec![token],
            unreadable_earlier: Some(e),
        },
    }
}

/// How an exit record says its command ended, for a log line: `exit 0`, `signal 9`, …
pub fn describe_end(e: &ExitRecord) -> String {
    match (e.outcome, e.code, e.signal) {
        (Outcome::Exited, Some(code), _) => format!("exit {code}"),
        (Outcome::Signalled, _, Some(signal)) => format!("signal {signal}"),
        (Outcome::SpawnFailed, ..) => "it could not be started".into(),
        (Outcome::AlreadyStarted, ..) => "not started: started by an earlier claim".into(),
        _ => "its end recorded".into(),
    }
}

/// The exit record of claim `token` whose command was never started (`outcome` says why it
/// was not, `error` in words), at `now`.
pub fn not_started(token: u64, outcome: Outcome, error: String, now: &str) -> ExitRecord {
    ExitRecord {
        token,
        outcome,
        code: None,
        signal: None,
        timed_out: false,
        term_requested: false,
        error: Some(error),
        started_at: None,
        finished_at: now.to_string(),
        repeats: None,
    }
}
