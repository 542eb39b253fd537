//! Settling a claim: deciding what became of one claim of a run from its run files — the one
//! place that does it, used both when a shim this daemon spawned exits (the reap) and by startup
//! recovery. Public, so that the shim's own tests settle a claim exactly as recovery does.
//!
//! This module writes nothing but the tombstone, and creates nothing but the segment of the
//! lock it takes: it never touches the database (it hands back a [`Transition`] for the caller
//! to write) and never signals a process (killing what is left of an orphaned command is the
//! caller's). When a retry is due is [`crate::retry`]'s to say.
//!
//! # Fates: what became of one claim
//!
//! [`settle`] looks at the run's files for the claim's token, in this order; each case has
//! exactly one answer, so a run is never started twice nor forgotten:
//!
//! | fate | what the run's files show | transition ([`transition`]) |
//! | --- | --- | --- |
//! | [`Fate::Alive`] | the shim holds the run's lock | none: keep supervising it (or adopt it) |
//! | [`Fate::Ended`] | lock free, an `exit` record of this claim | the real status from the record ([`outcome`]), with a retry if one is due |
//! | [`Fate::Orphaned`] | lock free, no `exit` of this claim, and a process that is not a zombie runs in the command's process group (the pid in `running`) within the shim's session (the pid and start time in `started`): what outlived a killed shim, whose parent-death signal reaches the command alone. Or: the files hold no `running` record of the claim (removed, emptied, overwritten by hand) and a process runs in a group with the number the daemon recorded for the command ([`leftover_group`]; session `None`) | none yet: the caller SIGKILLs the group (only one identified by its session: a bare number may have been reused), as the shim would have on its way out, and keeps the run active (its slot and seats held) while it polls the group; once it is empty the run is settled again (→ `Lost`, or what the files then say), so a retry never runs beside what is left of the attempt before |
//! | [`Fate::Unreadable`] | lock free, no valid `exit` of this claim, and a line of the record slot (or overflow file) that is not a record: it may have been the end | `lost`, with a note saying the records could not be read (never "the shim died"); retried per the project's policy, never requeued as the same attempt |
//! | [`Fate::Lost`] | lock free, a `started` record of this claim, no `exit` | `lost`, retried if the project has retries left |
//! | [`Fate::NeverStarted`] | lock free, no `started` record of this claim, and the machine has not restarted since the claim | holding the lock, a durable `tombstone` record for the token, then requeue (`starting → queued`, same attempt): the tombstone stops a shim that was spawned but had not yet taken the lock from starting the run later |
//! | [`Fate::StartUnknown`] | lock free, no `started` record of this claim, but the machine may have restarted since the claim ([`crate::boot`]: a `started` record is not synced, and a restart may have lost it) | tombstone as above (a late shim may exist after all), then `lost`, retried per policy: the command may have run |
//!
//! Every bad line found is logged at ERROR (run id, file, line number), and reading goes on, so
//! a valid `exit` record after it still counts. An I/O error reading the files (a record that
//! failed to read is not a missing one) is an error: the caller looks again later.
//!
//! # What an exit record means: `outcome`
//!
//! [`outcome`] maps an exit record to a status: a spawn failure → `failed`; not started because
//! the run's files already held another claim's `started` record (`already_started`) → `lost`;
//! the shim's timeout fired → `timed_out`; the shim got SIGTERM, SIGINT or SIGHUP (a cancel, or
//! a signal from outside fleet) → `cancelled`; exit 0 → `succeeded`; any other exit code, or a
//! death by signal → `failed`. `fleet check` compares a terminal run's row with its exit record
//! through the same function.
//!
//! # Another claim's `started` record
//!
//! **Invariant:** a shim never starts a command whose run's files hold the `started` record of
//! another claim. Recovery requeues a claim only when it provably never started, so no such
//! record can come from fleet's own history: it comes from a database restored from an older
//! backup that still queued a run that has run since, from another program that queued the run
//! again while it ran, or from another install's files with the run's id. The shim, right after
//! its tombstone check and from the same read of its record slot, starts nothing. When the files
//! also hold that claim's `exit` record, the command's end is known: the shim records it again
//! as this claim's (`repeats` naming the earlier claim), and the run ends as its command did,
//! with no retry — its retry, if it had one, was decided with that end, in the history the
//! database lost, and may have run. Otherwise it records an exit of outcome `already_started`;
//! the run ends `lost`, retried by the project's policy as any lost run, under a new id and new
//! files.

use std::io;

use runrecord::{ExitRecord, Outcome, Records, RunFiles};
use store::{Change, Millis, RunStatus, Transition};

use crate::retry::RetryPolicy;

/// What the run files say about one claim of a run.
#[derive(Clone, Debug, PartialEq)]
pub enum Fate {
    /// The shim holds the lock: the run is in flight.
    Alive,
    /// The command ended and its shim recorded how.
    Ended(ExitRecord),
    /// The command never started; a tombstone now bars any late shim of this claim.
    NeverStarted,
    /// No `started` record of the claim, but the machine may have restarted since the claim
    /// was made ([`crate::boot`]), and a record not yet on disk then would be lost with it: the
    /// command may have started, so the claim is never queued again as if it had not. Its
    /// end is unknown, as for [`Fate::Lost`]. The claim is tombstoned all the same: it is
    /// judged so whenever a restart cannot be ruled out (no boot id to compare, an unreadable
    /// record of boots), so a late shim of it may still be alive.
    StartUnknown,
    /// The command may have started, and nothing recorded its end.
    Lost,
    /// The shim is gone without recording the command's end, but processes of the command's
    /// process group still run: children the shim's death did not take with it (its
    /// parent-death signal reaches the command alone). The run is not over: it must not end,
    /// nor be retried beside what is left of it, until the group is empty; then it settles as
    /// [`Fate::Lost`] (or as whatever its files then say).
    ///
    /// Normally the group is identified by its number (the command's pid, from the claim's
    /// `running` record) and its session (the shim's pid and start time, from its `started`
    /// record: the shim leads a session of its own), never by the number alone — the start
    /// time tells a reused session number apart ([`crate::sys::process::group_alive`]); the
    /// caller ends the group, as the shim would have, and waits. When the run files hold no
    /// `running` record of the claim (removed, emptied or overwritten by hand) but the daemon
    /// recorded the command's pid, the group is known by that number alone (`session` is
    /// `None`): the caller holds the run's seats until no process of that group runs, and never
    /// signals it, since the number may since have been reused.
    Orphaned {
        /// The command's process group.
        pgid: i32,
        /// Its session as [`crate::sys::process::group_alive`] identifies it (the shim's pid
        /// and start time), or `None` when only the group's number is known.
        session: Option<crate::sys::process::Session>,
    },
    /// The command may have started, and the record file holds no end for this claim but a
    /// line that cannot be read, which may have been it: the end is unknown, as for [`Fate::Lost`], and the note says why (never "the shim
    /// died"). The text names the unreadable line.
    Unreadable(String),
}

impl Fate {
    /// Its name in the daemon's log: `alive`, `ended`, `never_started`, `start_unknown`,
    /// `lost`, `orphaned` or `unreadable`.
    pub fn name(&self) -> &'static str {
        match self {
            Fate::Alive => "alive",
            Fate::Ended(_) => "ended",
            Fate::NeverStarted => "never_started",
            Fate::StartUnknown => "start_unknown",
            Fate::Lost => "lost",
            Fate::Orphaned { .. } => "orphaned",
            Fate::Unreadable(_) => "unreadable",
        }
    }
}

/// Reads (and, for a claim that never started, tombstones) the run files of `token`'s claim.
/// Every line of the record file that is not a record is logged (ERROR, with the run's id, the
/// file and the line's number) and read past: a valid exit record of the claim counts whatever
/// bad lines surround it.
///
/// Errors: I/O errors on the run's files, a record that could not be read included (the
/// caller looks again later: a record that failed to read is not a missing one, and taking it
/// for one would call a run that ended `lost`, or requeue one that started). When no valid exit
/// record of the claim is found but a line that is not a valid record is, that may have been
/// the record that mattered: the fate is
/// [`Fate::Unreadable`] (the command may have started, so the claim is never requeued, and
/// never given a made-up status). Either way, when the claim's `running` record names a
/// command whose process group still has processes — or, with no such record, `recorded_pgid`
/// does ([`leftover_group`]) — the fate is [`Fate::Orphaned`] instead: the run is not over.
///
/// `recorded_pgid` is the command's pid as the daemon recorded it for this claim (the shim's
/// report, or the database's `running` row), if it did: it is what identifies the command's
/// group when the files no longer can (see [`Fate::Orphaned`]).
///
/// `start_survives`: whether a `started` record of this claim, had its shim written one, would
/// still be readable ([`crate::boot::Boots::start_survives`]: false when the machine may have
/// restarted since the claim). When it would not, a claim with no such record is tombstoned
/// as a never-started one is, and is [`Fate::StartUnknown`], never [`Fate::NeverStarted`].
pub fn settle(
    dir: &RunFiles,
    token: u64,
    recorded_pgid: Option<i32>,
    start_survives: bool,
) -> io::Result<Fate> {
    let Some(lock) = dir.try_lock()? else {
        return Ok(Fate::Alive);
    };
    let mut records = dir.records()?;
    for bad in &records.bad {
        tracing::error!(run = dir.id(), "{bad}");
    }
    if let Some(exit) = records.exit.take().filter(|e| e.token == token) {
        return Ok(Fate::Ended(exit));
    }
    // From here the end is unknown: the shim is gone (its lock was free) without an exit
    // record of this claim. What its command started may still run.
    if let Some((pgid, session)) = leftover_group(Some(&records), token, recorded_pgid) {
        return Ok(Fate::Orphaned { pgid, session });
    }
    if let Some(bad) = records.bad.first() {
        return Ok(Fate::Unreadable(bad.to_string()));
    }
    if records.started.is_some_and(|s| s.token == token) {
        return Ok(Fate::Lost);
    }
    fail::fail_point!("recovery-before-tombstone", |_| std::process::abort());
    dir.write_tombstone(&lock, token)?;
    fail::fail_point!("recovery-after-tombstone", |_| std::process::abort());
    // Tombstoned either way: a claim is judged unsure without any restart too (no boot id
    // to compare, an unreadable record of boots), and then a late shim of it may still be
    // on its way to the lock.
    Ok(if start_survives {
        Fate::NeverStarted
    } else {
        Fate::StartUnknown
    })
}

/// What is left of `token`'s command when its shim is gone without recording its end: its
/// process group, while a process of it still runs ([`Fate::Orphaned`]), and the session that
/// identifies it — the one rule for settling and for `fleet check`.
///
/// - From `records` (`None`: the records could not be read at all), when they hold the
///   claim's `running` (the group, the command's pid) and `started` (the session: the shim's
///   pid and start time) records: the group within that session
///   ([`crate::sys::process::group_alive`]). An error reading `/proc` counts as nothing left.
/// - Else, when the records hold no `running` record of the claim (removed, emptied or
///   overwritten by hand), by `recorded`, the command's pid the daemon recorded (the shim's
///   report, or the database's `running` row): a group with that number, session `None`. Known
///   by number alone, such a group is waited for, never signalled. Unsure (`/proc`
///   unreadable) counts as running here: the run stays active a while longer, which holds its
///   seats and decides nothing. Without this, a run whose files were removed would settle as
///   never started, or as lost with a retry, and a run would start beside its command.
pub fn leftover_group(
    records: Option<&Records>,
    token: u64,
    recorded: Option<i32>,
) -> Option<(i32, Option<crate::sys::process::Session>)> {
    let running = records.and_then(|r| r.running.as_ref().filter(|x| x.token == token));
    if let Some(running) = running {
        let started = records?.started.as_ref().filter(|s| s.token == token)?;
        let session = (started.shim_pid, started.shim_start_time);
        return crate::sys::process::group_alive(running.pid, Some(session))
            .unwrap_or(false)
            .then_some((running.pid, Some(session)));
    }
    let pgid = recorded.filter(|&p| p > 1)?;
    crate::sys::process::group_alive(pgid, None)
        .unwrap_or(true)
        .then_some((pgid, None))
}

/// The command's pid the database recorded for `run`'s claim (its `running` row), if any: the
/// `recorded` of [`settle`] and [`leftover_group`].
pub fn recorded_pgid(run: &store::Run) -> Option<i32> {
    run.pid.filter(|_| run.status == RunStatus::Running)
}

/// The terminal status, exit code, signal and reason an exit record stands for.
///
/// `term_requested` means the shim was sent a termination signal — the daemon's SIGTERM for a
/// cancel, or one from outside fleet (timeouts are the shim's own and say `timed_out`) — so such
/// a run ends `cancelled` whatever its exit code. Its note is not decided here: the store adds
/// the cancel request's words, or says that no cancel was requested, when it writes the end
/// (it alone knows, in the same transaction, whether a request was made).
pub fn outcome(exit: &ExitRecord) -> (RunStatus, Option<i32>, Option<i32>, Option<String>) {
    match exit.outcome {
        Outcome::SpawnFailed => (
            RunStatus::Failed,
            None,
            None,
            Some(
                exit.error
                    .clone()
                    .unwrap_or_else(|| "the command could not be started".into()),
            ),
        ),
        Outcome::AlreadyStarted => (
            RunStatus::Lost,
            None,
            None,
            Some(exit.error.clone().unwrap_or_else(|| {
                "not started: its command had been started by another claim".into()
            })),
        ),
        _ if exit.repeats.is_some() => {
            let (status, code, signal, _) = outcome(&ExitRecord {
                repeats: None,
                ..exit.clone()
            });
            let claim = exit.repeats.unwrap_or_default();
            (
                status,
                code,
                signal,
                Some(format!(
                    "not started again: the run's files hold its end under an earlier claim ({claim}), \
                     which the database had lost (restored from an older backup, or queued again by another program?); not retried"
                )),
            )
        }
        _ if exit.timed_out => (
            RunStatus::TimedOut,
            exit.code,
            exit.signal,
            Some("timeout expired".into()),
        ),
        // The store adds the request's words ("cancelled by operator", "replaced by the
        // occurrence at …") or says there was none.
        _ if exit.term_requested => (RunStatus::Cancelled, exit.code, exit.signal, None),
        Outcome::Exited if exit.code == Some(0) => (RunStatus::Succeeded, Some(0), None, None),
        Outcome::Exited => (RunStatus::Failed, exit.code, None, None),
        Outcome::Signalled => (
            RunStatus::Failed,
            None,
            exit.signal,
            Some(format!("killed by signal {}", exit.signal.unwrap_or(0))),
        ),
    }
}

/// The database transition for a settled fate; `None` for [`Fate::Alive`] and
/// [`Fate::Orphaned`] (the run stays active). The retry it asks
/// for (from `policy`) is dropped by the store when the run's cancel was requested: an accepted
/// cancel is final.
pub fn transition(
    run_id: store::RunId,
    token: u64,
    attempt: u32,
    fate: &Fate,
    policy: RetryPolicy,
    now: Millis,
) -> Option<Transition> {
    let change = match fate {
        Fate::Alive | Fate::Orphaned { .. } => return None,
        Fate::NeverStarted => Change::Requeue {
            reason: "the command never started; queued again, same attempt".into(),
        },
        Fate::StartUnknown => Change::Finish {
            status: RunStatus::Lost,
            exit_code: None,
            signal: None,
            reason: Some(
                "the machine may have restarted since this run was claimed, and its command \
                 may have started before that: its start is not written to disk at once"
                    .into(),
            ),
            retry: policy.next(RunStatus::Lost, attempt, now),
            finished_at: None,
        },
        Fate::Lost => Change::Finish {
            status: RunStatus::Lost,
            exit_code: None,
            signal: None,
            reason: Some("the shim died without recording the command's end".into()),
            retry: policy.next(RunStatus::Lost, attempt, now),
            finished_at: None,
        },
        Fate::Unreadable(what) => Change::Finish {
            status: RunStatus::Lost,
            exit_code: None,
            signal: None,
            reason: Some(format!(
                "the run's end is unknown: its records could not be read ({what})"
            )),
            retry: policy.next(RunStatus::Lost, attempt, now),
            finished_at: None,
        },
        Fate::Ended(exit) => {
            let (status, exit_code, signal, reason) = outcome(exit);
            Change::Finish {
                status,
                exit_code,
                signal,
                reason,
                // An end repeated from an earlier claim's records was decided when that claim
                // ended, retry included, in a history the database lost: a retry now could be
                // a second run of an attempt that has run.
                retry: match exit.repeats {
                    Some(_) => None,
                    None => policy.next(status, attempt, now),
                },
                // The shim's clock is this machine's; the database's rows are by its own.
                finished_at: exit.finished_ms().map(store::db_clock::to_database),
            }
        }
    };
    Some(Transition {
        run_id,
        token,
        change,
    })
}

#[cfg(test)]
pub(crate) mod tests;
