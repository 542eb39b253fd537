//! Waiting for runs to end (`fleet wait`, `fleet enqueue --wait`): blocks until runs, with their
//! retries, have ended, and exits as their command did.
//!
//! The wait reads the database only, never the daemon: it works while no daemon runs and across
//! a daemon's crash and restart (the run's shim keeps its exit status until a daemon records
//! it). It polls with the store's change probe, which costs microseconds per look and takes no
//! lock, so a runs table is read again only after something was committed.
//!
//! Exit status of a wait (docs/REFERENCE.md): the command's exit code; 128 + N for a command
//! ended by signal N (a timed-out run included); 1 for a run `lost`, `cancelled`, or failed
//! without an exit code (it could not be started), with the reason on stderr; 124 when
//! `--timeout` expires first (the runs are left as they are); 141 when the reader of stdout
//! left. With several runs: the first non-zero status in the order the ids were given, so the
//! result does not depend on which run ended first.

use std::time::{Duration, Instant};

use store::{Run, RunId, RunStatus, Store, StoreError};

use crate::console;
use crate::failure::{Failure, Result};

/// How often the change probe is looked at: short enough that a script waiting on a quick job
/// is not slowed down, long enough to cost nothing while a long job runs.
const POLL: Duration = Duration::from_millis(50);

/// Exit status when `--timeout` expires before the runs end (as `timeout(1)` does).
const TIMED_OUT: u8 = 124;

/// Waits until every run of `ids` (following each one's retries) has ended, printing one status
/// line per run as it ends, then fails with the exit status of the module doc (or returns `Ok`
/// when every run succeeded).
///
/// A row another program left with a value fleet cannot read is waited on: the run goes on,
/// and its end is read once the row is fixed (said once on stderr).
///
/// Errors: an unknown id (exit 2, before waiting at all); the database unreadable (exit 1);
/// `timeout` expired ([`TIMED_OUT`]).
pub fn wait(store: &Store, ids: &[RunId], timeout: Option<Duration>) -> Result<()> {
    let start = Instant::now();
    // Where each wait stands: the newest known attempt of each run given, until it ended.
    let mut current: Vec<Option<RunId>> = Vec::with_capacity(ids.len());
    for &id in ids {
        match store.get_run(id) {
            Ok(_) => {}
            Err(StoreError::UnknownRun(_)) => return Err(Failure::unknown_run(id)),
            Err(e) if e.is_refused_row() => {}
            Err(e) => return Err(Failure::action(e)),
        }
        current.push(Some(id));
    }
    let mut codes: Vec<Option<(u8, Option<String>)>> = vec![None; ids.len()];
    // The runs whose row could not be read, once said.
    let mut said: Vec<RunId> = Vec::new();
    let mut probe = store.change_probe().map_err(Failure::action)?;
    loop {
        // The first look is always a change (see `ChangeProbe::changed`).
        if probe.changed().map_err(Failure::action)? {
            for (i, slot) in current.iter_mut().enumerate() {
                let Some(id) = *slot else { continue };
                match last_attempt(store, id) {
                    Ok(Step::Waiting(run)) => *slot = Some(run.id),
                    Ok(Step::Ended(run)) => {
                        *slot = None;
                        let (code, why) = exit_status(&run);
                        console::println(status_line(ids[i], &run))?;
                        codes[i] = Some((code, why));
                    }
                    // Its row (or a retry's) holds a value fleet cannot read: another
                    // program's write, which someone may fix while the run goes on.
                    Err((at, e)) if e.is_refused_row() => {
                        *slot = Some(at);
                        if !said.contains(&at) {
                            said.push(at);
                            console::eprintln(format_args!(
                                "fleet: {e}; still waiting: the run goes on, and its end is read once the row is fixed"
                            ));
                        }
                    }
                    Err((_, e)) => return Err(Failure::action(e)),
                }
            }
        }
        if current.iter().all(Option::is_none) {
            break;
        }
        if let Some(limit) = timeout {
            if start.elapsed() >= limit {
                // The ids as given (a run may be on a later attempt by now).
                let left: Vec<String> = ids
                    .iter()
                    .zip(&current)
                    .filter(|(_, slot)| slot.is_some())
                    .map(|(id, _)| id.to_string())
                    .collect();
                return Err(Failure {
                    code: TIMED_OUT,
                    message: format!(
                        "timed out after {} waiting for run {} (left as it is)",
                        humantime::format_duration(limit),
                        left.join(", ")
                    ),
                    reported: false,
                });
            }
        }
        // A run may take hours: a reader that left (`fleet wait 5 | head -n 1`) is noticed
        // here, not at the next line printed.
        if console::stdout_reader_gone() {
            return Err(Failure::reader_gone());
        }
        std::thread::sleep(POLL);
    }
    // Every reason is said, not only the one whose code is the exit status.
    let mut first = None;
    for (code, why) in codes.into_iter().flatten() {
        if let Some(why) = &why {
            console::eprintln(format_args!("fleet: {why}"));
        }
        if code != 0 && first.is_none() {
            first = Some(code);
        }
    }
    match first {
        None => Ok(()),
        Some(code) => Err(Failure {
            code,
            // Already said: the status line on stdout, any reason on stderr.
            message: String::new(),
            reported: true,
        }),
    }
}

/// Where one wait stands after a look at the database.
enum Step {
    /// The chain's newest attempt, not ended yet.
    Waiting(Run),
    /// The chain's last attempt, ended with no retry after it.
    Ended(Run),
}

/// Follows run `id`'s retries (read fresh) to the newest attempt. Errors: with the id of the
/// attempt whose read failed (where the wait stands until it can be read).
fn last_attempt(store: &Store, id: RunId) -> std::result::Result<Step, (RunId, StoreError)> {
    let mut run = store.get_run(id).map_err(|e| (id, e))?;
    loop {
        if !run.status.is_terminal() {
            return Ok(Step::Waiting(run));
        }
        // A retry is written in the transaction that ends the run, so an ended run without
        // one is the end of the chain.
        match store.next_attempt(&run).map_err(|e| (run.id, e))? {
            Some(next) => run = next,
            None => return Ok(Step::Ended(run)),
        }
    }
}

/// The exit status a wait on `run` (ended) reports, and the reason to say on stderr, if any.
fn exit_status(run: &Run) -> (u8, Option<String>) {
    let reason = || {
        format!(
            "run {} {}: {}",
            run.id,
            run.status,
            // A reason the shim wrote starts with "fleet: " already; the line printed starts
            // with it too, once.
            run.reason
                .as_deref()
                .map(|r| r.strip_prefix("fleet: ").unwrap_or(r))
                .unwrap_or("no reason recorded")
        )
    };
    match run.status {
        RunStatus::Succeeded => (0, None),
        RunStatus::Failed | RunStatus::TimedOut => match (run.signal, run.exit_code) {
            (Some(sig), _) => (128u8.saturating_add(sig.clamp(0, 127) as u8), None),
            (None, Some(code)) if code != 0 => ((code & 0xff) as u8, None),
            // Failed without an exit code: the command could not be started.
            _ => (1, Some(reason())),
        },
        _ => (1, Some(reason())),
    }
}

/// The line printed when a waited-for run has ended: `run ID STATUS …` with the exit code or
/// signal, and the attempt that ended when it is not the run given.
fn status_line(asked: RunId, run: &Run) -> String {
    let mut line = format!("run {asked} ({}) {}", run.project, run.status);
    match (run.exit_code, run.signal) {
        (Some(code), _) => line += &format!(", exit code {code}"),
        (None, Some(sig)) => line += &format!(", signal {sig}"),
        _ => {}
    }
    if run.id != asked {
        line += &format!(", after {} attempts (last: run {})", run.attempt, run.id);
    }
    line
}
