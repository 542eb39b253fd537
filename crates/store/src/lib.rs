//! fleet's store: the SQLite schema, its migrations, and every SQL statement of the project.
//!
//! Nothing outside this crate speaks SQL. The API speaks in operations — enqueue, claim,
//! apply transitions, occupancy, take over — so that a PostgreSQL store for several hosts can
//! later offer the same operations (claims with `FOR UPDATE SKIP LOCKED` and so on) without the
//! supervisor changing.
//!
//! Rules every write here follows, and why:
//! - Writes run in `BEGIN IMMEDIATE` transactions: the write lock is taken up front, so a
//!   transaction never fails half-way on an upgrade from reader to writer.
//! - The claim is one guarded `UPDATE … WHERE id = ? AND status = 'queued' RETURNING …`,
//!   committed before anything is spawned (the brief's failure 2: a run that stays `queued` while
//!   its worker starts can be handed out again).
//! - A partial unique index makes two active runs of one project impossible to write, whatever
//!   a packer decides (the brief's failure 1, caught a second time by the database).
//! - Every transition is checked against the one state machine in [`status`] and appended to the
//!   `events` table with the epoch and the occupancy at that moment, for `fleet check`.
//! - A busy database (another connection holds the write lock past the busy timeout) surfaces
//!   as an error for which [`StoreError::is_busy`] is true; the caller retries later, never in
//!   a spin.
//!
//! Times are `i64` milliseconds since the Unix epoch, UTC ([`Millis`]).

mod schedules;
mod schema;
pub mod status;

use std::path::{Path, PathBuf};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

pub use schedules::{FireRequest, Fired, OverlapPolicy, ScheduleRow};
pub use status::{RunStatus, Trigger, ALL_STATUSES, TRANSITIONS};

/// A run's id: the `runs.id` primary key. Never reused.
pub type RunId = i64;

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// How long a statement waits for another connection's write lock before it fails as busy.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The current time as [`Millis`].
pub fn now_ms() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// Formats [`Millis`] as RFC 3339 in UTC with millisecond precision (`2026-11-30T10:33:43.123Z`).
pub fn rfc3339(ms: Millis) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => ms.to_string(),
    }
}

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file could not be opened or its schema brought up to date.
    #[error("database {}: {source}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// What SQLite or the pool said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A statement failed; see [`StoreError::is_busy`] for the retryable kind.
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// No connection could be had from the pool.
    #[error("database connection pool: {0}")]
    Pool(#[from] r2d2::Error),
    /// The id names no run.
    #[error("no run with id {0}")]
    UnknownRun(RunId),
    /// A write would move a run along a transition the state machine does not allow.
    #[error("run {run}: {from} -> {to} is not an allowed transition")]
    IllegalTransition {
        /// The run.
        run: RunId,
        /// Its status in the database.
        from: RunStatus,
        /// The status asked for.
        to: RunStatus,
    },
    /// The caller's epoch is not the current one: another daemon took over the state directory.
    #[error("epoch {ours} is stale: the state directory was taken over (epoch {current})")]
    Fenced {
        /// The epoch the caller holds.
        ours: i64,
        /// The epoch in the database.
        current: i64,
    },
    /// A row holds a value this version does not understand (written by another program).
    #[error("run {run}: column {column} holds {value:?}, which fleet does not understand")]
    Corrupt {
        /// The run.
        run: RunId,
        /// The column.
        column: &'static str,
        /// The value found.
        value: String,
    },
}

impl StoreError {
    /// True when the error is SQLite's `SQLITE_BUSY`/`SQLITE_LOCKED`: another connection held the
    /// write lock past the busy timeout. The operation changed nothing and may be retried later.
    pub fn is_busy(&self) -> bool {
        match self {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            _ => false,
        }
    }
}

type Result<T, E = StoreError> = std::result::Result<T, E>;

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
    /// the run folder of an old run with the same id must still not pass for the new claim's
    /// (a counter made a run that never ran look `succeeded` from the old run's exit record).
    pub claim_token: u64,
    /// The epoch of the daemon that last claimed it.
    pub epoch: Option<i64>,
    /// The run this one retries.
    pub retry_of: Option<RunId>,
}

const RUN_COLUMNS: &str =
    "id, project, namespace, status, attempt, trigger, occurrence, priority, \
     not_before, enqueued_at, started_at, finished_at, pid, exit_code, signal, reason, \
     cancel_requested, claim_token, epoch, retry_of";

fn run_from_row(row: &Row<'_>) -> rusqlite::Result<std::result::Result<Run, StoreError>> {
    let id: RunId = row.get(0)?;
    let status: String = row.get(3)?;
    let trigger: String = row.get(5)?;
    let Ok(status) = status.parse::<RunStatus>() else {
        return Ok(Err(StoreError::Corrupt {
            run: id,
            column: "status",
            value: status,
        }));
    };
    let Some(trigger) = Trigger::parse(&trigger) else {
        return Ok(Err(StoreError::Corrupt {
            run: id,
            column: "trigger",
            value: trigger,
        }));
    };
    Ok(Ok(Run {
        id,
        project: row.get(1)?,
        namespace: row.get(2)?,
        status,
        attempt: row.get(4)?,
        trigger,
        occurrence: row.get(6)?,
        priority: row.get(7)?,
        not_before: row.get(8)?,
        enqueued_at: row.get(9)?,
        started_at: row.get(10)?,
        finished_at: row.get(11)?,
        pid: row.get(12)?,
        exit_code: row.get(13)?,
        signal: row.get(14)?,
        reason: row.get(15)?,
        cancel_requested: row.get::<_, i64>(16)? != 0,
        claim_token: row.get::<_, i64>(17)? as u64,
        epoch: row.get(18)?,
        retry_of: row.get(19)?,
    }))
}

fn collect_runs(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
) -> Result<Vec<Run>> {
    let rows = stmt.query_map(params, run_from_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}

/// A run to be queued.
#[derive(Clone, Debug, PartialEq, Eq)]
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
}

/// A filter for [`Store::list_runs`]. Results come newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only this project's runs.
    pub project: Option<String>,
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// At most this many.
    pub limit: Option<u32>,
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
}

/// A run this EVAL now owns: `queued → starting` is committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The run.
    pub run: Run,
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
    Requeue {
        /// Why, in words (kept in the event).
        reason: String,
    },
}

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

/// What [`Store::apply`] did with one transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Written. With a retry, the new run's id.
    Done {
        /// The run's new status.
        status: RunStatus,
        /// The id of the retry run queued with it, if any.
        retry: Option<RunId>,
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

/// A common table expression `p(name)`: each project that has queued runs, found by jumping
/// through the `runs_queue` index from one project to the next (a skip-scan), so its cost grows
/// with the number of projects, not with the length of the queue. The last row is NULL.
///
/// `INDEXED BY` is needed: without statistics (fleet never runs ANALYZE) SQLite prefers the
/// equality on `runs_by_status (status, id)` and sorts every queued run by project at each step,
/// which makes one EVAL cost projects × queue length (13 s with 100,000 queued runs over 1,000
/// projects; `cargo bench -p supervisor --bench eval`). With it, a query that could no longer use
/// the index fails at prepare instead of silently scanning.
const QUEUED_PROJECTS: &str = "WITH RECURSIVE p(name) AS ( \
       SELECT (SELECT project FROM runs INDEXED BY runs_queue WHERE status = 'queued' \
               ORDER BY project LIMIT 1) \
       UNION ALL \
       SELECT (SELECT project FROM runs INDEXED BY runs_queue WHERE status = 'queued' \
               AND project > p.name ORDER BY project LIMIT 1) FROM p WHERE p.name IS NOT NULL)";

/// A handle on one state directory's database. Cheap to clone; all clones share one pool.
///
/// Every method blocks on SQLite: async callers run them on a blocking thread
/// (`tokio::task::spawn_blocking`), never on the runtime.
#[derive(Clone)]
pub struct Store {
    pool: r2d2::Pool<SqliteConnectionManager>,
    path: PathBuf,
}

/// A connection of its own that tells whether anything was committed to the database since it
/// last looked — by this process's other connections or by any other program — through SQLite's
/// `PRAGMA data_version`. It reads a counter and takes no lock, so it costs microseconds
/// however large the database is.
///
/// Why: the daemon's backstop tick (for writers that never nudge it) would otherwise run a
/// full EVAL every second on an idle install; with this it runs one only when something changed.
pub struct ChangeProbe {
    conn: Connection,
    last: Option<i64>,
}

impl ChangeProbe {
    /// True if a commit happened since the previous call (always true on the first call).
    ///
    /// Errors: SQLite's, if the database cannot be read.
    pub fn changed(&mut self) -> Result<bool> {
        let now: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        let changed = self.last != Some(now);
        self.last = Some(now);
        Ok(changed)
    }
}

impl Store {
    /// Opens (creating if missing) the database at `path`, in WAL mode with the given busy
    /// timeout, and brings its schema up to date.
    ///
    /// Errors: [`StoreError::Open`] when the file cannot be opened or created, or the migration
    /// fails (for instance a database written by a newer fleet).
    pub fn open(path: &Path, busy_timeout: Duration) -> Result<Store> {
        let open_err = |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Open {
            path: path.to_path_buf(),
            source: e,
        };
        let busy_ms = busy_timeout.as_millis() as u64;
        let init = move |c: &mut Connection| -> rusqlite::Result<()> {
            c.busy_timeout(Duration::from_millis(busy_ms))?;
            // Every statement the daemon uses stays prepared (the default of 16 is fewer than
            // the store's statements, so an EVAL kept re-preparing the ones it evicted).
            c.set_prepared_statement_cache_capacity(64);
            // FULL: a committed claim or transition survives power loss, not only a crash —
            // the brief's "every state change is durable before the side effect it licenses".
            // cache_size: 16 MiB of pages per connection instead of SQLite's 2 MiB. Every EVAL
            // reads the first leaf page of each project's queue in runs_queue; at 100,000 queued
            // runs that index alone is 500 pages (2 MiB), and a smaller cache re-reads it from the
            // file at every EVAL. Pages are cached only as they are read: a small database uses
            // little of it.
            c.execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
                 PRAGMA cache_size = -16384;",
            )
        };
        // One plain connection first: a file that is not a database, or a place where none can
        // be created, fails here at once with SQLite's own words, instead of after the pool's
        // connection timeout.
        // SQLite can answer "busy" here without waiting in its busy handler (another connection
        // is switching the file to WAL or recovering it): that passes, so it is retried until
        // the busy timeout; any other error is final.
        let deadline = std::time::Instant::now() + busy_timeout;
        let mut conn = loop {
            let attempt = Connection::open(path).and_then(|mut c| init(&mut c).map(|()| c));
            match attempt {
                Ok(c) => break c,
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if matches!(
                        e.code,
                        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                    ) && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(open_err(Box::new(e))),
            }
        };
        let migrations = schema::migrations();
        // Two processes opening a new database at once (the daemon and a first `fleet enqueue`)
        // both try to migrate; the loser's transaction rolls back. It then finds the schema
        // current and carries on, instead of failing the command.
        let mut tries = 0;
        loop {
            match migrations.to_latest(&mut conn) {
                Ok(()) => break,
                Err(e) => {
                    let current = migrations.current_version(&conn).ok();
                    if current == Some(schema::latest()) {
                        break;
                    }
                    tries += 1;
                    if tries >= 5 {
                        return Err(open_err(Box::new(e)));
                    }
                    std::thread::sleep(Duration::from_millis(20 * tries));
                }
            }
        }
        drop(conn);
        let manager = SqliteConnectionManager::file(path).with_init(init);
        let pool = r2d2::Pool::builder()
            .max_size(4)
            .min_idle(Some(1))
            .connection_timeout(Duration::from_secs(30))
            .build(manager)
            .map_err(|e| open_err(Box::new(e)))?;
        Ok(Store {
            pool,
            path: path.to_path_buf(),
        })
    }

    /// A [`ChangeProbe`] on this database: a new connection, outside the pool.
    ///
    /// Errors: [`StoreError::Sqlite`] if the database cannot be opened.
    pub fn change_probe(&self) -> Result<ChangeProbe> {
        Ok(ChangeProbe {
            conn: Connection::open(&self.path)?,
            last: None,
        })
    }

    fn conn(&self) -> Result<r2d2::PooledConnection<SqliteConnectionManager>> {
        Ok(self.pool.get()?)
    }

    /// Queues a run; returns its id. Works whether or not a daemon is running.
    pub fn enqueue(&self, new: &NewRun, now: Millis) -> Result<RunId> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let id = insert_run(&tx, new, 1, None, now)?;
        tx.commit()?;
        Ok(id)
    }

    /// One run by id. Errors: [`StoreError::UnknownRun`].
    pub fn get_run(&self, id: RunId) -> Result<Run> {
        let conn = self.conn()?;
        get_run(&conn, id)?.ok_or(StoreError::UnknownRun(id))
    }

    /// Runs matching the filter, newest first.
    pub fn list_runs(&self, filter: &RunFilter) -> Result<Vec<Run>> {
        let conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE (?1 IS NULL OR project = ?1) \
             AND (?2 IS NULL OR status = ?2) ORDER BY id DESC LIMIT ?3"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let limit = filter.limit.map(i64::from).unwrap_or(-1);
        collect_runs(
            &mut stmt,
            params![filter.project, filter.status.map(|s| s.as_str()), limit],
        )
    }

    /// The DB running set: every run the database records as active (`starting` or `running`).
    pub fn active_runs(&self) -> Result<Vec<Run>> {
        let conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('starting','running') ORDER BY id"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        collect_runs(&mut stmt, [])
    }

    /// The best claimable queued run of each project (highest priority, then oldest), among runs
    /// whose `not_before` has passed at `now`.
    ///
    /// Cost: one index seek per project that has queued runs (two when its best run is
    /// delayed), whatever the queue's length — a skip-scan over the `runs_queue` index — so an
    /// EVAL costs in proportion to the projects, not to the backlog.
    pub fn queue_heads(&self, now: Millis) -> Result<Vec<QueueHead>> {
        let conn = self.conn()?;
        // h: the first entry of each project in runs_queue order (its best queued run, delayed
        // or not), found by one seek past the previous project. Only a project whose best run
        // is delayed (a retry's backoff) needs a second seek.
        let mut stmt = conn.prepare_cached(
            "WITH RECURSIVE h(project, id, not_before) AS ( \
                 SELECT * FROM (SELECT project, id, not_before FROM runs INDEXED BY runs_queue \
                   WHERE status = 'queued' ORDER BY project, priority DESC, id LIMIT 1) \
                 UNION ALL \
                 SELECT r.project, r.id, r.not_before FROM h JOIN runs r ON r.id = ( \
                   SELECT id FROM runs INDEXED BY runs_queue WHERE status = 'queued' \
                     AND project > h.project ORDER BY project, priority DESC, id LIMIT 1)) \
             SELECT r.id, r.project, r.namespace, r.priority FROM h JOIN runs r ON r.id = \
               CASE WHEN h.not_before <= ?1 THEN h.id ELSE ( \
                 SELECT id FROM runs INDEXED BY runs_queue WHERE status = 'queued' \
                   AND project = h.project AND not_before <= ?1 \
                   ORDER BY priority DESC, id LIMIT 1) END",
        )?;
        let rows = stmt.query_map([now], |r| {
            Ok(QueueHead {
                run_id: r.get(0)?,
                project: r.get(1)?,
                namespace: r.get(2)?,
                priority: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The earliest `not_before` among queued runs still waiting for it, if any: the daemon's
    /// next reason to EVAL.
    pub fn next_not_before(&self, now: Millis) -> Result<Option<Millis>> {
        let conn = self.conn()?;
        let v: Option<Millis> = conn
            .prepare_cached(
                // One seek in runs_waiting; forced, for the same reason as in QUEUED_PROJECTS
                // (runs_by_status would read every queued run).
                "SELECT MIN(not_before) FROM runs INDEXED BY runs_waiting \
                 WHERE status = 'queued' AND not_before > ?1",
            )?
            .query_row([now], |r| r.get(0))?;
        Ok(v)
    }

    /// Takes over the state directory: increments the epoch and records this daemon's row.
    /// The caller must already hold the daemon lock. Returns the new epoch.
    pub fn take_over(
        &self,
        pid: i32,
        config_path: &str,
        caps_json: &str,
        now: Millis,
    ) -> Result<i64> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let epoch: i64 = tx.query_row(
            "UPDATE meta SET value = value + 1 WHERE key = 'epoch' RETURNING value",
            [],
            |r| r.get(0),
        )?;
        tx.execute(
            "INSERT INTO daemon (id, pid, epoch, started_at, config_path, caps_json, reload_error, updated_at) \
             VALUES (1, ?1, ?2, ?3, ?4, ?5, NULL, ?3) \
             ON CONFLICT (id) DO UPDATE SET pid = ?1, epoch = ?2, started_at = ?3, config_path = ?4, \
               caps_json = ?5, reload_error = NULL, updated_at = ?3",
            params![pid, epoch, now, config_path, caps_json],
        )?;
        tx.commit()?;
        Ok(epoch)
    }

    /// Updates the daemon row after a reload: the caps now in force and the last reload error.
    pub fn set_daemon_config(
        &self,
        epoch: i64,
        caps_json: &str,
        reload_error: Option<&str>,
        now: Millis,
    ) -> Result<()> {
        let conn = self.conn()?;
        conn.execute(
            "UPDATE daemon SET caps_json = ?2, reload_error = ?3, updated_at = ?4 WHERE epoch = ?1",
            params![epoch, caps_json, reload_error, now],
        )?;
        Ok(())
    }

    /// The daemon row, if a daemon ever took over this state directory.
    pub fn daemon_row(&self) -> Result<Option<DaemonRow>> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                "SELECT pid, epoch, started_at, config_path, caps_json, reload_error, updated_at FROM daemon WHERE id = 1",
                [],
                |r| {
                    Ok(DaemonRow {
                        pid: r.get(0)?,
                        epoch: r.get(1)?,
                        started_at: r.get(2)?,
                        config_path: r.get(3)?,
                        caps_json: r.get(4)?,
                        reload_error: r.get(5)?,
                        updated_at: r.get(6)?,
                    })
                },
            )
            .optional()?)
    }

    /// The current epoch (0 before any daemon took over).
    pub fn epoch(&self) -> Result<i64> {
        let conn = self.conn()?;
        Ok(
            conn.query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| {
                r.get(0)
            })?,
        )
    }

    /// Claims runs: for each request, `queued → starting` in one guarded statement, all in one
    /// transaction committed before this returns — before anything is spawned.
    ///
    /// A run that is no longer queued (claimed, cancelled) is left out of the result, so a second
    /// claim of one run hands back nothing (the brief's failure 2). A claim that would give a
    /// project a second active run is refused by the unique index and left out too. Claims carry
    /// `epoch` and are refused as [`StoreError::Fenced`] when it is not the current one.
    ///
    /// Errors: busy database (nothing was claimed; retry on a later EVAL), fencing.
    pub fn claim(
        &self,
        epoch: i64,
        requests: &[ClaimRequest],
        now: Millis,
    ) -> Result<Vec<Claimed>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_epoch(&tx, epoch)?;
        let mut out = Vec::with_capacity(requests.len());
        {
            let sql = format!(
                "UPDATE runs SET status = 'starting', namespace = ?2, claim_token = ((random() & 9223372036854775807) | 1), \
                   epoch = ?3, started_at = ?4, finished_at = NULL, pid = NULL, exit_code = NULL, signal = NULL \
                 WHERE id = ?1 AND status = 'queued' RETURNING {RUN_COLUMNS}"
            );
            let mut claim = tx.prepare_cached(&sql)?;
            let mut global = tx.prepare_cached(
                "SELECT COUNT(*) FROM runs WHERE status IN ('starting','running')",
            )?;
            let mut in_ns = tx.prepare_cached(
                "SELECT COUNT(*) FROM runs WHERE status IN ('starting','running') AND namespace = ?1",
            )?;
            for req in requests {
                let row = claim
                    .query_row(params![req.run_id, req.namespace, epoch, now], run_from_row)
                    .optional();
                let run = match row {
                    Ok(Some(run)) => run?,
                    Ok(None) => continue,
                    Err(rusqlite::Error::SqliteFailure(e, _))
                        if e.code == rusqlite::ErrorCode::ConstraintViolation =>
                    {
                        tracing::warn!(
                            run = req.run_id,
                            "claim refused: its project already has an active run"
                        );
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let g: u32 = global.query_row([], |r| r.get(0))?;
                let n: u32 = in_ns.query_row([&req.namespace], |r| r.get(0))?;
                insert_event(
                    &tx,
                    &EventRow {
                        run: &run,
                        from: Some(RunStatus::Queued),
                        epoch: Some(epoch),
                        at: now,
                        occupancy: Some((g, req.global_cap, n, req.namespace_cap)),
                        detail: None,
                    },
                )?;
                out.push(Claimed { run });
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// Applies transitions of active runs in one transaction (the reap of an EVAL). Each is
    /// checked against the state machine and the run's current claim token; one that no longer
    /// fits is skipped, not failed, so a batch is never blocked by one stale entry.
    ///
    /// Errors: busy database (nothing was written; the caller keeps the batch and retries),
    /// fencing, and [`StoreError::IllegalTransition`] for a change the state machine forbids
    /// from a non-terminal status (a bug in the caller).
    pub fn apply(
        &self,
        epoch: i64,
        transitions: &[Transition],
        now: Millis,
    ) -> Result<Vec<Applied>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_epoch(&tx, epoch)?;
        let mut out = Vec::with_capacity(transitions.len());
        for t in transitions {
            out.push(apply_one(&tx, epoch, t, now)?);
        }
        tx.commit()?;
        Ok(out)
    }

    /// `fleet cancel`: a queued run becomes `cancelled` at once; an active one gets its cancel
    /// flag set, and stays active until the daemon has stopped it (a status describes the
    /// world, never an intention). Errors: [`StoreError::UnknownRun`], busy.
    pub fn request_cancel(&self, id: RunId, reason: &str, now: Millis) -> Result<CancelOutcome> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let run = get_run(&tx, id)?.ok_or(StoreError::UnknownRun(id))?;
        let outcome = match run.status {
            RunStatus::Queued => {
                tx.execute(
                    "UPDATE runs SET status = 'cancelled', finished_at = ?2, reason = ?3 WHERE id = ?1 AND status = 'queued'",
                    params![id, now, reason],
                )?;
                let after = get_run(&tx, id)?.ok_or(StoreError::UnknownRun(id))?;
                insert_event(
                    &tx,
                    &EventRow {
                        run: &after,
                        from: Some(RunStatus::Queued),
                        epoch: None,
                        at: now,
                        occupancy: None,
                        detail: Some(reason),
                    },
                )?;
                CancelOutcome::Cancelled
            }
            RunStatus::Starting | RunStatus::Running => {
                tx.execute(
                    "UPDATE runs SET cancel_requested = 1, reason = ?2 WHERE id = ?1",
                    params![id, reason],
                )?;
                CancelOutcome::Requested
            }
            done => CancelOutcome::AlreadyFinished(done),
        };
        tx.commit()?;
        Ok(outcome)
    }

    /// Cancels every queued run of the given project in one statement (used when a project is
    /// removed from the config). Returns how many.
    pub fn cancel_queued_of(&self, project: &str, reason: &str, now: Millis) -> Result<usize> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let ids: Vec<RunId> = {
            let mut stmt = tx.prepare_cached(
                "UPDATE runs SET status = 'cancelled', finished_at = ?2, reason = ?3 \
                 WHERE project = ?1 AND status = 'queued' RETURNING id",
            )?;
            let rows = stmt.query_map(params![project, now, reason], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        for id in &ids {
            if let Some(run) = get_run(&tx, *id)? {
                insert_event(
                    &tx,
                    &EventRow {
                        run: &run,
                        from: Some(RunStatus::Queued),
                        epoch: None,
                        at: now,
                        occupancy: None,
                        detail: Some(reason),
                    },
                )?;
            }
        }
        tx.commit()?;
        Ok(ids.len())
    }

    /// Projects that have queued runs (for spotting runs of projects no longer in the config).
    pub fn queued_projects(&self) -> Result<Vec<String>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "{QUEUED_PROJECTS} SELECT name FROM p WHERE name IS NOT NULL"
        ))?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every event with `seq > after`, oldest first.
    pub fn events_after(&self, after: i64) -> Result<Vec<Event>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT seq, run_id, at, epoch, from_status, to_status, project, namespace, attempt, \
               claim_token, global_active, global_cap, ns_active, ns_cap, detail \
             FROM events WHERE seq > ?1 ORDER BY seq",
        )?;
        let rows = stmt.query_map([after], |r| {
            let from: Option<String> = r.get(4)?;
            let to: String = r.get(5)?;
            Ok((
                from,
                to,
                Event {
                    seq: r.get(0)?,
                    run_id: r.get(1)?,
                    at: r.get(2)?,
                    epoch: r.get(3)?,
                    from: None,
                    to: RunStatus::Queued,
                    project: r.get(6)?,
                    namespace: r.get(7)?,
                    attempt: r.get(8)?,
                    claim_token: r.get::<_, i64>(9)? as u64,
                    global_active: r.get(10)?,
                    global_cap: r.get(11)?,
                    namespace_active: r.get(12)?,
                    namespace_cap: r.get(13)?,
                    detail: r.get(14)?,
                },
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (from, to, mut ev) = row?;
            let parse = |s: String| {
                s.parse::<RunStatus>().map_err(|_| StoreError::Corrupt {
                    run: ev.run_id,
                    column: "events.status",
                    value: s,
                })
            };
            ev.from = from.map(parse).transpose()?;
            ev.to = parse(to)?;
            out.push(ev);
        }
        Ok(out)
    }
}

fn check_epoch(conn: &Connection, ours: i64) -> Result<()> {
    let current: i64 = conn
        .prepare_cached("SELECT value FROM meta WHERE key = 'epoch'")?
        .query_row([], |r| r.get(0))?;
    if current != ours {
        return Err(StoreError::Fenced { ours, current });
    }
    Ok(())
}

fn get_run(conn: &Connection, id: RunId) -> Result<Option<Run>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    match stmt.query_row([id], run_from_row).optional()? {
        Some(r) => Ok(Some(r?)),
        None => Ok(None),
    }
}

fn insert_run(
    conn: &Connection,
    new: &NewRun,
    attempt: u32,
    retry_of: Option<RunId>,
    now: Millis,
) -> Result<RunId> {
    let sql = format!(
        "INSERT INTO runs (project, namespace, status, attempt, trigger, occurrence, priority, not_before, \
           enqueued_at, retry_of) VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING {RUN_COLUMNS}"
    );
    let run = conn.prepare_cached(&sql)?.query_row(
        params![
            new.project,
            new.namespace,
            attempt,
            new.trigger.as_str(),
            new.occurrence,
            new.priority,
            new.not_before,
            now,
            retry_of
        ],
        run_from_row,
    )??;
    insert_event(
        conn,
        &EventRow {
            run: &run,
            from: None,
            epoch: None,
            at: now,
            occupancy: None,
            detail: None,
        },
    )?;
    Ok(run.id)
}

struct EventRow<'a> {
    run: &'a Run,
    from: Option<RunStatus>,
    epoch: Option<i64>,
    at: Millis,
    /// (global active, global cap, namespace active, namespace cap)
    occupancy: Option<(u32, u32, u32, Option<u32>)>,
    detail: Option<&'a str>,
}

fn insert_event(conn: &Connection, e: &EventRow<'_>) -> Result<()> {
    let (ga, gc, na, nc) = match e.occupancy {
        Some((ga, gc, na, nc)) => (Some(ga), Some(gc), Some(na), nc),
        None => (None, None, None, None),
    };
    conn.prepare_cached(
        "INSERT INTO events (run_id, at, epoch, from_status, to_status, project, namespace, attempt, \
           claim_token, global_active, global_cap, ns_active, ns_cap, detail) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        e.run.id,
        e.at,
        e.epoch,
        e.from.map(|s| s.as_str()),
        e.run.status.as_str(),
        e.run.project,
        e.run.namespace,
        e.run.attempt,
        e.run.claim_token as i64,
        ga,
        gc,
        na,
        nc,
        e.detail
    ])?;
    Ok(())
}

fn apply_one(conn: &Connection, epoch: i64, t: &Transition, now: Millis) -> Result<Applied> {
    let Some(run) = get_run(conn, t.run_id)? else {
        return Err(StoreError::UnknownRun(t.run_id));
    };
    if run.claim_token != t.token {
        return Ok(Applied::Skipped(format!(
            "run {} is at claim {}, the transition is for claim {}",
            run.id, run.claim_token, t.token
        )));
    }
    let cancelled_before_start = matches!(t.change, Change::Requeue { .. }) && run.cancel_requested;
    let to = match &t.change {
        Change::Running { .. } => RunStatus::Running,
        Change::Finish { status, .. } => *status,
        Change::Requeue { .. } if cancelled_before_start => RunStatus::Cancelled,
        Change::Requeue { .. } => RunStatus::Queued,
    };
    if !run.status.can_become(to) {
        if run.status == to || run.status.is_terminal() {
            return Ok(Applied::Skipped(format!(
                "run {} is already {}",
                run.id, run.status
            )));
        }
        return Err(StoreError::IllegalTransition {
            run: run.id,
            from: run.status,
            to,
        });
    }
    if matches!(t.change, Change::Finish { .. }) && !to.is_terminal() {
        return Err(StoreError::IllegalTransition {
            run: run.id,
            from: run.status,
            to,
        });
    }
    let mut retry_id = None;
    let detail: Option<String>;
    match &t.change {
        Change::Running { pid } => {
            conn.prepare_cached("UPDATE runs SET status = 'running', pid = ?2 WHERE id = ?1")?
                .execute(params![run.id, pid])?;
            detail = pid.map(|p| format!("pid {p}"));
        }
        Change::Finish {
            status,
            exit_code,
            signal,
            reason,
            retry,
            finished_at,
        } => {
            conn.prepare_cached(
                // A note written when the run was made (skipped occurrences before it) is kept.
                "UPDATE runs SET status = ?2, exit_code = ?3, signal = ?4, \
                   reason = CASE WHEN ?5 IS NULL THEN reason WHEN reason IS NULL THEN ?5 \
                                 ELSE reason || '; ' || ?5 END, \
                   finished_at = ?6 WHERE id = ?1",
            )?
            .execute(params![
                run.id,
                status.as_str(),
                exit_code,
                signal,
                reason,
                finished_at.unwrap_or(now)
            ])?;
            detail = reason.clone();
            if let Some(not_before) = retry {
                let next = NewRun {
                    project: run.project.clone(),
                    namespace: run.namespace.clone(),
                    priority: run.priority,
                    trigger: Trigger::Retry,
                    occurrence: run.occurrence,
                    not_before: *not_before,
                };
                retry_id = Some(insert_run(conn, &next, run.attempt + 1, Some(run.id), now)?);
            }
        }
        Change::Requeue { .. } if cancelled_before_start => {
            let reason = "cancelled before it started";
            conn.prepare_cached(
                "UPDATE runs SET status = 'cancelled', reason = ?2, finished_at = ?3, pid = NULL WHERE id = ?1",
            )?
            .execute(params![run.id, reason, now])?;
            detail = Some(reason.to_string());
        }
        Change::Requeue { reason } => {
            conn.prepare_cached(
                "UPDATE runs SET status = 'queued', started_at = NULL, pid = NULL WHERE id = ?1",
            )?
            .execute([run.id])?;
            detail = Some(reason.clone());
        }
    }
    let after = get_run(conn, run.id)?.ok_or(StoreError::UnknownRun(run.id))?;
    insert_event(
        conn,
        &EventRow {
            run: &after,
            from: Some(run.status),
            epoch: Some(epoch),
            at: now,
            occupancy: None,
            detail: detail.as_deref(),
        },
    )?;
    Ok(Applied::Done {
        status: to,
        retry: retry_id,
    })
}
