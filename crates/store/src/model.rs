//! The store's row types, shared by every backend: runs, what is asked of them, what became of
//! them, the events, the daemon row and the schedule cursors.
//!
//! Plain data only. Nothing here reads the clock except [`now_ms`], and nothing here may name
//! SQL or a driver type: a backend maps its rows to these types, so that callers never learn
//! which database they talk to.

use crate::{RunStatus, Trigger};

/// A run's id: the `runs.id` primary key. Never reused.
pub type RunId = i64;

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// The current time as [`Millis`]. Every wall-clock reading of fleet goes through here. A
/// process that follows a shared database's clock ([`db_clock`](crate::db_clock)) reads the
/// database's time; any other reads its local clock ([`local_now_ms`]).
pub fn now_ms() -> Millis {
    crate::db_clock::followed_now().unwrap_or_else(local_now_ms)
}

/// The local wall clock as [`Millis`], whatever clock the process follows. In a test build
/// (feature `failpoints`) it may be shifted by an offset (see [`test_clock`](crate::test_clock));
/// a production build reads the system clock alone.
pub fn local_now_ms() -> Millis {
    chrono::Utc::now()
        .timestamp_millis()
        .saturating_add(crate::test_clock::offset_ms())
}

/// Formats [`Millis`] as RFC 3339 in UTC with millisecond precision (`2026-11-30T10:33:43.123Z`).
pub fn rfc3339(ms: Millis) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => ms.to_string(),
    }
}

/// One run as the database records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// Its id.
    pub id: RunId,
    /// The project it runs.
    pub project: String,
    /// The namespace it counts against: the project's at enqueue, re-read from the config at
    /// claim, and fixed from then on (a moved project's active run counts where it started).
    pub namespace: String,
    /// Where it is in the state machine.
    pub status: RunStatus,
    /// 1 for the first attempt, 2 for the first retry, …
    pub attempt: u32,
    /// What made it.
    pub trigger: Trigger,
    /// The schedule occurrence it belongs to, for scheduled runs and their retries.
    pub occurrence: Option<Millis>,
    /// Higher runs first; equal priorities run in enqueue order.
    pub priority: i64,
    /// It may not be claimed before this instant (0: at once).
    pub not_before: Millis,
    /// When it was queued.
    pub enqueued_at: Millis,
    /// When it was claimed (the start of its current attempt).
    pub started_at: Option<Millis>,
    /// When it reached its terminal status.
    pub finished_at: Option<Millis>,
    /// The command's process id (also its process group id), once known.
    pub pid: Option<i32>,
    /// The command's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, when one did.
    pub signal: Option<i32>,
    /// Why it ended as it did, in words (spawn errors, "project removed", skipped occurrences…).
    pub reason: Option<String>,
    /// An operator asked to cancel it; the status changes only once the process is gone.
    pub cancel_requested: bool,
    /// Which claim of this run is current (0 before the first). Run files carry it, so files
    /// left by an earlier claim are never mistaken for the current one. Random (63 bits), not a
    /// counter: after a database is restored from a backup, run ids and counters repeat, and
    /// the run files of an old run with the same id must still not pass for the new claim's
    /// (a counter made a run that never ran look `succeeded` from the old run's exit record).
    pub claim_token: u64,
    /// The epoch of the daemon that last claimed it.
    pub epoch: Option<i64>,
    /// The run this one retries.
    pub retry_of: Option<RunId>,
    /// Arguments appended to the project's argv for this run (empty: none). Retries keep them.
    pub args: Vec<String>,
    /// Variables added to the project's environment for this run, in the order given (empty:
    /// none). Retries keep them.
    pub env: Vec<(String, String)>,
    /// The run an operator's rerun repeats (trigger `rerun`).
    pub rerun_of: Option<RunId>,
    /// The failed run an `on_failure` run reports (trigger `on_failure`, and its retries).
    pub hook_of: Option<RunId>,
    /// Which of its project's parallel seats it holds while active (0 when the project runs one
    /// run at a time). Two active runs of one project never hold the same seat: the database
    /// refuses it.
    pub seat: u32,
    /// The host whose daemon claimed it (its current or last claim); `None` for a run never
    /// claimed, or claimed before the database knew hosts. Only that host's daemon recovers,
    /// reaps and stops it.
    pub host: Option<String>,
}

/// Rows of `runs` as read: the runs this version can read, and apart the rows it cannot (in
/// the order the read gives, each list in it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunRows {
    /// The runs read.
    pub runs: Vec<Run>,
    /// The rows another program left with a value fleet cannot read.
    pub unreadable: Vec<UnreadableRun>,
}

/// A row of `runs` fleet cannot read in full: a value another program wrote that this version
/// does not understand (arguments that are not JSON, a number out of range). It keeps what
/// names it and, for an active run, counts its seat — its project, namespace and host, plain text columns — so that caps hold
/// while it is there: a cap is never exceeded because a row was unreadable, and no run waits for
/// ever because of another's row. Nothing else about it is decided until it can be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreadableRun {
    /// Its id.
    pub id: RunId,
    /// Its project (bytes that are not UTF-8 replaced, as `from_utf8_lossy` does).
    pub project: String,
    /// Its namespace (the same).
    pub namespace: String,
    /// The host whose daemon claimed it, if the row names one (the same).
    pub host: Option<String>,
    /// Whether its project, namespace and host are the row's own: false when one of them is
    /// not UTF-8 text, and then which caps the run counts against cannot be known (no other
    /// row's names compare equal to it).
    pub seat_known: bool,
    /// Its claim token, as [`Run::claim_token`].
    pub claim_token: u64,
    /// What could not be read, in words (names the column and the value when known).
    pub error: String,
}

/// A run to be queued. `Default` is a manual run of no project, for struct update syntax.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewRun {
    /// The project (the caller checked it exists in the config).
    pub project: String,
    /// The project's namespace in the config at this moment.
    pub namespace: String,
    /// Higher first.
    pub priority: i64,
    /// What made it.
    pub trigger: Trigger,
    /// The schedule occurrence, for scheduled runs.
    pub occurrence: Option<Millis>,
    /// Not to be claimed before this instant (0: at once).
    pub not_before: Millis,
    /// Arguments appended to the project's argv for this run alone.
    pub args: Vec<String>,
    /// Variables added to the project's environment for this run alone.
    pub env: Vec<(String, String)>,
    /// For a rerun: the run it repeats.
    pub rerun_of: Option<RunId>,
    /// For an `on_failure` run: the failed run it reports.
    pub hook_of: Option<RunId>,
}

/// A filter for [`Store::list_runs`](crate::Store::list_runs). Results come newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only this project's runs.
    pub project: Option<String>,
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// At most this many.
    pub limit: Option<u32>,
    /// Only runs in one of these statuses (none: any); combines with `status`.
    pub statuses: Vec<RunStatus>,
    /// Only runs counted in this namespace (the one recorded with the run).
    pub namespace: Option<String>,
    /// Only runs of this trigger.
    pub trigger: Option<Trigger>,
    /// Only runs enqueued at or after this instant (milliseconds since the Unix epoch, UTC).
    pub since: Option<Millis>,
    /// Only runs enqueued at or before this instant (milliseconds since the Unix epoch, UTC).
    pub until: Option<Millis>,
}

/// The best queued run of one project: what the packers choose from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueHead {
    /// The run.
    pub run_id: RunId,
    /// Its project.
    pub project: String,
    /// The namespace recorded at enqueue (the supervisor re-reads the current one).
    pub namespace: String,
    /// Its priority.
    pub priority: i64,
}

/// One run the packer picked, with the caps in force, to be claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The run to claim.
    pub run_id: RunId,
    /// The namespace the run counts against from now on (the project's, in the config in force).
    pub namespace: String,
    /// The global cap in force, recorded in the claim's event.
    pub global_cap: u32,
    /// The namespace's cap in force, if it has one (the fallback packer has none).
    pub namespace_cap: Option<u32>,
    /// How many runs of the project may be active at once (its `max_parallel`, at least 1 in a
    /// valid config): the claim takes the lowest free seat below it, or is left out.
    pub max_parallel: u32,
    /// The claiming host's own capacity (`[hosts.NAME] max_concurrency`), if it has one: a
    /// third cap, counted over that host's active runs only.
    pub host_cap: Option<u32>,
    /// The version of the published config the caps above come from. `Some(v)`: the claim
    /// claims nothing (error [`StoreError::StaleConfig`](crate::StoreError::StaleConfig)) when
    /// the database's published version is not `v` (0 when nothing is published), so every
    /// claim counts against the caps of the version in force. `None`: the claimer does not
    /// follow published configs (one host on SQLite, tests); no check.
    pub config_version: Option<i64>,
}

/// A run this EVAL now owns: `queued → starting` is committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The run.
    pub run: Run,
}

/// The most [`crate::Store::reserve_run_ids`] moves the next run id in one go.
pub const MAX_RESERVE_JUMP: RunId = 1_000_000_000;

/// What [`crate::Store::reserve_run_ids`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserved {
    /// The database's next id was above the id given already: nothing written.
    Ahead,
    /// New runs are now numbered above the id given; `from` is the id the next run would have
    /// had.
    Moved {
        /// The next id before.
        from: RunId,
    },
    /// The id given is more than [`MAX_RESERVE_JUMP`] past the next one (`next`): not taken.
    TooFar {
        /// The database's next id, unchanged.
        next: RunId,
    },
}

/// A claim the database refused although its run was queued and its seats free: a constraint,
/// or a trigger another program put on `runs` (raising an error, or dropping the write
/// silently). The run stays queued; nothing of the claim was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRefusal {
    /// The run whose claim was refused.
    pub run_id: RunId,
    /// The database's words (its message and code), or that a trigger dropped the write.
    pub reason: String,
}

/// What happens to an active run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// `starting → running`: the shim reported the command started with this pid.
    Running {
        /// The command's pid (its process group id).
        pid: Option<i32>,
    },
    /// `→ terminal`: the run ended. With `retry`, a new queued run (next attempt, trigger
    /// `retry`, not before the given instant) is inserted in the same transaction.
    Finish {
        /// One of the terminal statuses.
        status: RunStatus,
        /// The command's exit code, if it exited.
        exit_code: Option<i32>,
        /// The signal that ended it, if one did.
        signal: Option<i32>,
        /// Why, in words.
        reason: Option<String>,
        /// Queue the next attempt, not before this instant.
        retry: Option<Millis>,
        /// When the command ended, as its shim recorded it (None: now). The database may learn
        /// of an end much later (the daemon was down, the database busy); `finished_at` tells
        /// when it happened, not when it was written.
        finished_at: Option<Millis>,
    },
    /// `starting → queued`, same attempt: recovery proved the command never started. If a cancel
    /// was requested meanwhile, the run ends `cancelled` instead: requeueing it would only have
    /// it claimed, signalled and requeued again.
    ///
    /// A run the database holds as `running` did start (its shim reported the command's pid):
    /// "never started" then means its files were removed or replaced under it, and the run ends
    /// `lost` instead, with no retry (its command may still be running, unsupervised: another
    /// attempt could run beside it) and its failure hook queued. Never an error: an error here
    /// would stop every EVAL after it, for every project.
    Requeue {
        /// Why, in words (kept in the event).
        reason: String,
    },
}

/// The project whose run reports a failure: where a failed project's `on_failure` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureHook {
    /// The hook project.
    pub project: String,
    /// Its namespace in the config in force.
    pub namespace: String,
}

/// The failure hooks in force, by the name of the project whose failures they report. Handed to
/// [`Store::apply_with_hooks`](crate::Store::apply_with_hooks) by the caller, who reads them
/// from its config: the store never reads the config.
pub type FailureHooks = std::collections::BTreeMap<String, FailureHook>;

/// One change to one claim of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The run.
    pub run_id: RunId,
    /// The claim it concerns; a transition for an older claim is skipped, never applied.
    pub token: u64,
    /// The change.
    pub change: Change,
}

/// What [`Store::apply`](crate::Store::apply) did with one transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Written. With a retry, the new run's id.
    Done {
        /// The run's new status.
        status: RunStatus,
        /// The id of the retry run queued with it, if any.
        retry: Option<RunId>,
        /// The id of the failure hook's run queued with it, if any (trigger `on_failure`).
        hook: Option<RunId>,
        /// The run as written (its project, exit code, signal, times and note), for the log.
        run: Box<Run>,
    },
    /// Not written, harmlessly: the run is already past it (e.g. finished by recovery) or the
    /// token belongs to an older claim. The string says which.
    Skipped(String),
}

/// What `fleet cancel` achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The run was queued and is now `cancelled`.
    Cancelled,
    /// The run is active: the request is recorded; the daemon stops it and writes `cancelled`
    /// once the process is gone.
    Requested,
    /// The run had already ended with this status; nothing changed.
    AlreadyFinished(RunStatus),
}

/// One row of the append-only events table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Order of writing.
    pub seq: i64,
    /// The run.
    pub run_id: RunId,
    /// When.
    pub at: Millis,
    /// The epoch of the writer, when a daemon wrote it.
    pub epoch: Option<i64>,
    /// The status before (None for an insert).
    pub from: Option<RunStatus>,
    /// The status after.
    pub to: RunStatus,
    /// The run's project.
    pub project: String,
    /// The namespace it counted against.
    pub namespace: String,
    /// The run's attempt.
    pub attempt: u32,
    /// The claim token after the change.
    pub claim_token: u64,
    /// Active runs in the whole install right after the change (claims only).
    pub global_active: Option<u32>,
    /// The global cap in force (claims only).
    pub global_cap: Option<u32>,
    /// Active runs in the run's namespace right after the change (claims only).
    pub namespace_active: Option<u32>,
    /// The namespace's cap in force, if it had one (claims only).
    pub namespace_cap: Option<u32>,
    /// Words: a reason, a pid.
    pub detail: Option<String>,
}

/// The daemon's own row: who holds the state directory and what config is in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonRow {
    /// The host it runs on (its host name).
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// Its epoch.
    pub epoch: i64,
    /// When it took over.
    pub started_at: Millis,
    /// The config file it reads.
    pub config_path: String,
    /// The caps in force, as JSON written by the supervisor.
    pub caps_json: String,
    /// The last reload error, if the newest edit of the config was refused.
    pub reload_error: Option<String>,
    /// When the row was last written.
    pub updated_at: Millis,
}

/// A queued run whose delay [`Store::rebase_delays`](crate::Store::rebase_delays) counted again
/// from now, because the clock that set it has since stepped back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delayed {
    /// The run.
    pub run_id: RunId,
    /// Its project.
    pub project: String,
    /// The `not_before` it had (ms UTC), by the clock that was ahead.
    pub not_before_was: Millis,
    /// The `not_before` it has now (ms UTC).
    pub not_before: Millis,
}

/// A scheduled project's persisted cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRow {
    /// The project.
    pub project: String,
    /// The timetable the cursor belongs to (cron expression and timezone, as one string). When
    /// the config's timetable differs, the schedule starts afresh.
    pub timetable: String,
    /// The last occurrence handled, fired or skipped (ms UTC).
    pub cursor: Millis,
    /// The next occurrence after the cursor, if any (ms UTC).
    pub next_fire: Option<Millis>,
    /// How many occurrences were skipped (missed or overlapping) over the schedule's life.
    pub skipped_total: i64,
    /// The latest skipped occurrence.
    pub last_skipped: Option<Millis>,
    /// The last time the clock was found behind this schedule's cursor (it stepped back), if
    /// ever since the timetable was set.
    pub clock_back: Option<ClockBack>,
}

/// The clock found behind a schedule's cursor: the clock stepped back after the cursor was
/// written, and the schedule was resumed from the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockBack {
    /// When it was seen (ms UTC, by the corrected clock).
    pub seen_at: Millis,
    /// The cursor the clock was behind (ms UTC): the last occurrence handled before.
    pub cursor_was: Millis,
}

/// What to do with an occurrence that is due, given the project's active run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverlapPolicy {
    /// Skip the occurrence while a run of the project is active or waiting (recorded as a
    /// `cancelled` run with the reason, so it shows in `fleet runs`).
    Forbid,
    /// Queue it; it starts when the active run ends.
    Queue,
    /// Ask the active run to stop (cancel flag) and queue the new one.
    Replace,
}

/// One schedule step, written atomically by [`Store::fire_schedule`](crate::Store::fire_schedule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FireRequest {
    /// The project.
    pub project: String,
    /// Its namespace in the config in force.
    pub namespace: String,
    /// The timetable string (see [`ScheduleRow::timetable`]).
    pub timetable: String,
    /// The cursor the caller computed from (None: a new schedule). If the stored cursor differs,
    /// nothing is written: someone else advanced it.
    pub expected_cursor: Option<Millis>,
    /// The new cursor.
    pub cursor: Millis,
    /// The next occurrence after the new cursor.
    pub next_fire: Option<Millis>,
    /// The occurrence to fire now, if any.
    pub fire: Option<Millis>,
    /// Occurrences passed over without a run (missed), newest last: at most the latest hundred.
    pub skipped: Vec<Millis>,
    /// The earliest occurrence passed over, which `skipped` may not list when more were
    /// skipped than it keeps; the start of the range the run's note gives.
    pub skipped_first: Option<Millis>,
    /// The number of skipped occurrences, when more were skipped than `skipped` lists.
    pub skipped_count: u64,
    /// True when more occurrences were skipped than the scheduler counts exactly (1,102):
    /// `skipped_count` is then a lower bound, and the run's note says "at least". A count of
    /// exactly that many is exact, and this is false.
    pub skipped_count_at_least: bool,
    /// A missed occurrence that was too late to start (beyond starting_deadline): recorded as a
    /// `cancelled` run with the reason, so the operator sees it in `fleet runs`.
    pub too_late: Option<Millis>,
    /// The overlap policy for `fire`.
    pub overlap: OverlapPolicy,
    /// The project's `max_parallel` (1 by default; 0 is read as 1): `forbid` skips once this
    /// many runs are queued or active, `replace` stops the oldest active run once this many are
    /// active.
    pub max_parallel: u32,
    /// Set when the clock was found behind the stored cursor (it stepped back): the stored
    /// cursor, which `cursor` replaces although it is earlier. Recorded with `now` (see
    /// [`ScheduleRow::clock_back`]).
    pub clock_back_from: Option<Millis>,
}

/// What [`Store::fire_schedule`](crate::Store::fire_schedule) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fired {
    /// The queued run made for the occurrence.
    pub queued: Option<RunId>,
    /// A `cancelled` run recording a skipped occurrence (overlap forbid, too late, or paused).
    pub skipped_run: Option<RunId>,
    /// The active run asked to stop (overlap replace).
    pub replaced: Option<RunId>,
    /// False when the stored cursor had moved: nothing was written.
    pub written: bool,
}
