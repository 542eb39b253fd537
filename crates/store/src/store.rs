//! [`Store`], the one handle callers use, and [`ChangeProbe`]: each a thin front over a backend.
//!
//! It owns what every operation promises (the docs below) and the choice of backend. It must
//! never hold SQL or a driver type of its own: each method is one `match` that hands the call to
//! the backend (see the crate doc for why an enum).

use std::path::Path;
use std::time::Duration;

use crate::error::Result;
use crate::postgres::open::PgProbe;
use crate::postgres::PgStore;
use crate::sqlite::open::SqliteProbe;
use crate::sqlite::SqliteStore;
use crate::{
    Applied, CancelOutcome, ClaimRefusal, ClaimRequest, Claimed, DaemonRow, Delayed, Event,
    FailureHooks, FireRequest, Fired, HoldKind, Millis, NewRun, Pauses, ProjectActivity,
    PruneCandidate, PrunePolicy, QueueHead, Reserved, Run, RunFilter, RunId, RunRows, RunStatus,
    ScheduleRow, Transition,
};
use crate::{BulkCancelled, CancelSelection, StoreError};
use crate::{EndedTotal, QueueSummary};

/// How long a statement waits for another connection's write lock before it fails as busy.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A handle on one state directory's database. Cheap to clone; all clones share one pool.
///
/// Every method blocks on the database: async callers run them on a blocking thread
/// (`tokio::task::spawn_blocking`), never on the runtime.
#[derive(Clone)]
pub struct Store {
    pub(crate) backend: Backend,
}

/// The database behind a [`Store`].
#[derive(Clone)]
pub(crate) enum Backend {
    /// One SQLite file in the state directory.
    Sqlite(SqliteStore),
    /// A PostgreSQL database, which several hosts may share.
    Postgres(PgStore),
}

/// The runs of `rows`, or the error of its first unreadable row
/// ([`StoreError::UnreadableRow`]).
pub(crate) fn readable(rows: RunRows) -> Result<Vec<Run>> {
    match rows.unreadable.into_iter().next() {
        None => Ok(rows.runs),
        Some(bad) => Err(StoreError::UnreadableRow {
            run: bad.id,
            what: bad.error,
        }),
    }
}

impl Store {
    /// Opens (creating if missing) the SQLite database at `path`, in WAL mode with the given
    /// busy timeout, and brings its schema up to date.
    ///
    /// Errors: [`StoreError::Open`](crate::StoreError::Open) when the file cannot be opened or
    /// created, or the migration fails (for instance a database written by a newer fleet).
    pub fn open(path: &Path, busy_timeout: Duration) -> Result<Store> {
        Ok(Store {
            backend: Backend::Sqlite(SqliteStore::open(path, busy_timeout)?),
        })
    }

    /// Opens the SQLite database at `path` for reading only: nothing is created, migrated or
    /// written there, and neither the file nor its folder need be writable (a state directory
    /// on a read-only file system is read as it is). `Ok(None)` when the file holds no schema
    /// yet (nothing was ever queued). The `-wal` and `-shm` files a read has to create beside a
    /// database in WAL mode are removed once the store is dropped, unless another connection
    /// has it open by then.
    ///
    /// Errors: [`StoreError::Open`](crate::StoreError::Open) when the file cannot be opened or
    /// read, or its schema is not the one this build reads (newer, or older: a command that
    /// writes brings it up to date).
    pub fn open_read_only(path: &Path, busy_timeout: Duration) -> Result<Option<Store>> {
        Ok(
            SqliteStore::open_read_only(path, busy_timeout)?.map(|db| Store {
                backend: Backend::Sqlite(db),
            }),
        )
    }

    /// Connects to the PostgreSQL database `url` names (a `postgresql://…` URL, or
    /// `key=value` pairs such as `host=/run/postgresql dbname=fleet`), brings its schema up to
    /// date (in one transaction, under an advisory lock, so hosts starting at once do not race),
    /// and keeps a pool of connections whose statements wait at most `busy_timeout` for a lock
    /// before failing as busy.
    ///
    /// Errors: [`StoreError::Connect`](crate::StoreError::Connect) when the string cannot be
    /// read or the server cannot be reached (or is lost, or busy, during the migration);
    /// [`StoreError::Migrate`](crate::StoreError::Migrate) when the server refuses the
    /// migration (a role that may not create fleet's tables);
    /// [`StoreError::SchemaTooNew`](crate::StoreError::SchemaTooNew) for a database migrated by
    /// a newer fleet.
    pub fn open_postgres(url: &str, busy_timeout: Duration) -> Result<Store> {
        Ok(Store {
            backend: Backend::Postgres(PgStore::open(url, busy_timeout)?),
        })
    }

    /// Connects to the PostgreSQL database `url` names for reading only, the counterpart of
    /// [`Store::open_read_only`]: the schema is checked, never created nor migrated, and every
    /// session the store opens (its pool's and its change probes') runs with
    /// `default_transaction_read_only = on`, so no statement through it can write. It takes no
    /// lock and creates nothing, so a role with only `SELECT` on fleet's tables (and `USAGE`
    /// on their schema) may use it for every read, [`Store::change_probe`] included.
    ///
    /// Errors: [`StoreError::Connect`](crate::StoreError::Connect) when the string cannot be
    /// read or the server cannot be reached;
    /// [`StoreError::SchemaTooNew`](crate::StoreError::SchemaTooNew) for a database migrated by
    /// a newer fleet; [`StoreError::SchemaBehind`](crate::StoreError::SchemaBehind) for one
    /// whose schema is older than this build's, or missing (a daemon, or a command that
    /// writes, run by a role that may migrate it brings it up to date).
    pub fn open_postgres_read_only(url: &str, busy_timeout: Duration) -> Result<Store> {
        Ok(Store {
            backend: Backend::Postgres(PgStore::open_read_only(url, busy_timeout)?),
        })
    }

    /// A [`ChangeProbe`] on this database: a new connection, outside the pool.
    ///
    /// Errors: [`StoreError::Backend`](crate::StoreError::Backend) if the database cannot be
    /// opened.
    pub fn change_probe(&self) -> Result<ChangeProbe> {
        match &self.backend {
            Backend::Sqlite(db) => Ok(ChangeProbe {
                probe: Probe::Sqlite(db.change_probe()?),
            }),
            Backend::Postgres(db) => Ok(ChangeProbe {
                probe: Probe::Postgres(db.change_probe()?),
            }),
        }
    }

    /// Up to `limit` ended runs that `policy` lets go, by project then id (oldest first).
    /// Reads only: takes no write lock. Never returns a queued or active run, nor a project's
    /// newest ended run, nor one that ended at or after `policy.ended_before`.
    ///
    /// Errors: [`StoreError::Backend`](crate::StoreError::Backend).
    pub fn prune_candidates(
        &self,
        policy: &PrunePolicy,
        limit: usize,
    ) -> Result<Vec<PruneCandidate>> {
        match &self.backend {
            Backend::Sqlite(db) => db.prune_candidates(policy, limit),
            Backend::Postgres(db) => db.prune_candidates(policy, limit),
        }
    }

    /// Forgets the runs `ids` — each run's row and its events — in one short write
    /// transaction; a run that is not ended (any more) is left alone. Returns how many runs
    /// were forgotten. Callers remove a run's files first: a row without its files is the
    /// only in-between state a crash can leave, and the next prune finishes it.
    ///
    /// Errors: [`StoreError::Backend`](crate::StoreError::Backend) (busy when another
    /// connection held the write lock past the busy timeout; nothing was deleted then).
    pub fn forget_runs(&self, ids: &[RunId]) -> Result<usize> {
        match &self.backend {
            Backend::Sqlite(db) => db.forget_runs(ids),
            Backend::Postgres(db) => db.forget_runs(ids),
        }
    }

    /// Gives up to `pages` free pages of the database file back to the file system and
    /// truncates the write-ahead log when no reader needs it, so that file sizes follow the
    /// history kept. Cheap when there is nothing to give back. PostgreSQL: nothing to do (its
    /// autovacuum reuses the space).
    ///
    /// Errors: [`StoreError::Backend`](crate::StoreError::Backend).
    pub fn reclaim_space(&self, pages: u32) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(db) => db.reclaim_space(pages),
            // Autovacuum reuses freed space; there is no write-ahead log file of ours to trim.
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// Makes a database created before incremental vacuum existed give pages back too: one
    /// full `VACUUM`, which holds the write lock for as long as it rewrites the file (about a
    /// second per 100 MB). Returns whether it had to. Call it where a pause is harmless (a
    /// daemon's start, before its first claim). PostgreSQL: never needed (`Ok(false)`).
    ///
    /// Errors: [`StoreError::Backend`](crate::StoreError::Backend) (busy when another
    /// connection reads or writes meanwhile; nothing changed then).
    pub fn enable_incremental_vacuum(&self) -> Result<bool> {
        match &self.backend {
            Backend::Sqlite(db) => db.enable_incremental_vacuum(),
            Backend::Postgres(_) => Ok(false),
        }
    }

    /// Queues a run; returns its id. Works whether or not a daemon is running.
    pub fn enqueue(&self, new: &NewRun, now: Millis) -> Result<RunId> {
        match &self.backend {
            Backend::Sqlite(db) => db.enqueue(new, now),
            Backend::Postgres(db) => db.enqueue(new, now),
        }
    }

    /// One run by id. Errors: [`StoreError::UnknownRun`](crate::StoreError::UnknownRun).
    pub fn get_run(&self, id: RunId) -> Result<Run> {
        match &self.backend {
            Backend::Sqlite(db) => db.get_run(id),
            Backend::Postgres(db) => db.get_run(id),
        }
    }

    /// Runs matching the filter, newest first.
    ///
    /// Errors: the database's, and [`StoreError::UnreadableRow`] for the first matching row
    /// holding a value this version cannot read; see [`Store::list_rows`] for a read that goes
    /// on past such rows.
    pub fn list_runs(&self, filter: &RunFilter) -> Result<Vec<Run>> {
        readable(self.list_rows(filter)?)
    }

    /// Rows matching the filter, newest first: the runs this version can read, and apart those
    /// holding a value it cannot ([`crate::UnreadableRun`]). For listings that must still show every
    /// other run, and name the rows they cannot.
    ///
    /// Errors: the database's (a row's own unreadable value is not one).
    pub fn list_rows(&self, filter: &RunFilter) -> Result<RunRows> {
        match &self.backend {
            Backend::Sqlite(db) => db.list_rows(filter),
            Backend::Postgres(db) => db.list_rows(filter),
        }
    }

    /// The DB running set: every run the database records as active (`starting` or `running`),
    /// on every host, in id order.
    ///
    /// Errors: the database's, and [`StoreError::UnreadableRow`] for the first active row
    /// holding a value this version cannot read; see
    /// [`Store::active_rows`] for a read that goes on past such rows.
    pub fn active_runs(&self) -> Result<Vec<Run>> {
        readable(self.active_rows()?)
    }

    /// Every row the database records as active, on every host: the runs this version can
    /// read, and apart those holding a value it cannot ([`crate::UnreadableRun`], which still says
    /// what counts the run's seat). For the daemon, which must go on supervising every other
    /// run while another program's row cannot be read, and count that row's seat meanwhile.
    ///
    /// Errors: the database's (a row's own unreadable value is not one).
    pub fn active_rows(&self) -> Result<RunRows> {
        match &self.backend {
            Backend::Sqlite(db) => db.active_rows(),
            Backend::Postgres(db) => db.active_rows(),
        }
    }

    /// How many runs are in `status` now: for one-line summaries (the daemon's status under
    /// systemd), never for decisions. Errors: busy database.
    pub fn count_runs(&self, status: RunStatus) -> Result<u64> {
        match &self.backend {
            Backend::Sqlite(db) => db.count_runs(status),
            Backend::Postgres(db) => db.count_runs(status),
        }
    }

    /// The best claimable queued run of each project (highest priority, then oldest), among runs
    /// whose `not_before` has passed at `now`, in project name order.
    ///
    /// Cost: in proportion to the projects that have queued runs, whatever the queue's length,
    /// so an EVAL costs in proportion to the projects, not to the backlog: one row per project
    /// of the queue-heads table the store keeps in the transactions that change queued runs,
    /// and one index seek more for a project whose first run is delayed.
    pub fn queue_heads(&self, now: Millis) -> Result<Vec<QueueHead>> {
        match &self.backend {
            Backend::Sqlite(db) => db.queue_heads(now),
            Backend::Postgres(db) => db.queue_heads(now),
        }
    }

    /// The earliest `not_before` among queued runs still waiting for it, if any: the daemon's
    /// next reason to EVAL.
    pub fn next_not_before(&self, now: Millis) -> Result<Option<Millis>> {
        match &self.backend {
            Backend::Sqlite(db) => db.next_not_before(now),
            Backend::Postgres(db) => db.next_not_before(now),
        }
    }

    /// Counts again from `now` the delay of every queued run whose delay was set by a clock
    /// later than `now` by more than `tolerance` (ms): the clock has stepped back since, and
    /// the run would otherwise wait for as long as the clock was wrong. Such a run is told by
    /// its `enqueued_at`, written by the same clock; it gets `not_before = now + (not_before -
    /// enqueued_at)` and `enqueued_at = now`, and its reason says so. Returns the runs changed.
    ///
    /// Cost: a read of the delayed queued runs alone; a write only when one was found.
    ///
    /// Errors: busy database (nothing written), fencing.
    pub fn rebase_delays(
        &self,
        epoch: i64,
        now: Millis,
        tolerance: Millis,
    ) -> Result<Vec<Delayed>> {
        match &self.backend {
            Backend::Sqlite(db) => db.rebase_delays(epoch, now, tolerance),
            Backend::Postgres(db) => db.rebase_delays(epoch, now, tolerance),
        }
    }

    /// Takes over for host `host`: takes the next epoch (the one global counter, so an epoch
    /// names one incarnation of one host) into that host's row (made if new; a forgotten host
    /// rejoins). Fences only the previous daemon of the same host: its later writes are
    /// refused as [`StoreError::Fenced`](crate::StoreError::Fenced). Active runs nobody owns
    /// (claimed before the database knew hosts) become this host's; on SQLite, where one state
    /// directory is one host, every active run does. The caller must already hold the daemon
    /// lock. Returns the new epoch.
    ///
    /// Errors: busy database (nothing written).
    pub fn take_over(
        &self,
        host: &str,
        pid: i32,
        config_path: &str,
        caps_json: &str,
        now: Millis,
    ) -> Result<i64> {
        self.take_over_from(host, None, pid, config_path, caps_json, now)
    }

    /// Makes sure every take-over from now on gets an epoch above `highest`: the highest epoch
    /// this host's state directory has recorded a daemon under (its `boot` file). A database
    /// restored from an older backup would otherwise hand the next daemon an epoch an earlier
    /// one already held, and an epoch would no longer name one daemon's life. The counter only
    /// grows: returns whether it moved (nothing is written when it is already there).
    ///
    /// Errors: busy database (nothing written).
    pub fn reserve_epochs(&self, highest: i64) -> Result<bool> {
        match &self.backend {
            Backend::Sqlite(db) => db.reserve_epochs(highest),
            Backend::Postgres(db) => db.reserve_epochs(highest),
        }
    }

    /// Makes sure every run inserted from now on gets an id above `highest`: the highest run
    /// id that has files in this host's state directory. A database restored from an older
    /// backup would otherwise number new runs from where the backup left off, and a new run
    /// would share its id — its record slot, records and log — with a run of the lost history
    /// whose files are still here. Ids only grow: a value below the database's own next id
    /// changes nothing ([`Reserved::Ahead`], nothing written). A value more than
    /// [`MAX_RESERVE_JUMP`](crate::MAX_RESERVE_JUMP) ahead is not taken ([`Reserved::TooFar`]): no backup lags by a
    /// billion runs, so it is a stray file's name, and numbering past it would bring every
    /// install near the end of the id range (or past it: no run could be queued any more).
    ///
    /// Errors: busy database (nothing written).
    pub fn reserve_run_ids(&self, highest: RunId) -> Result<Reserved> {
        match &self.backend {
            Backend::Sqlite(db) => db.reserve_run_ids(highest),
            Backend::Postgres(db) => db.reserve_run_ids(highest),
        }
    }

    /// Updates the daemon row after a reload: the caps now in force and the last reload error.
    pub fn set_daemon_config(
        &self,
        epoch: i64,
        caps_json: &str,
        reload_error: Option<&str>,
        now: Millis,
    ) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(db) => db.set_daemon_config(epoch, caps_json, reload_error, now),
            Backend::Postgres(db) => db.set_daemon_config(epoch, caps_json, reload_error, now),
        }
    }

    /// The daemon row: the host that took over last and is not forgotten, if any (on SQLite,
    /// the one host). With several hosts, [`Store::hosts`] lists them all.
    pub fn daemon_row(&self) -> Result<Option<DaemonRow>> {
        match &self.backend {
            Backend::Sqlite(db) => db.daemon_row(),
            Backend::Postgres(db) => db.daemon_row(),
        }
    }

    /// Whether several hosts may share this database (PostgreSQL): a run's host then says
    /// which machine's disk holds its files; with SQLite every run is this state directory's.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// The current epoch (0 before any daemon took over).
    pub fn epoch(&self) -> Result<i64> {
        match &self.backend {
            Backend::Sqlite(db) => db.epoch(),
            Backend::Postgres(db) => db.epoch(),
        }
    }

    /// Claims runs: for each request, `queued → starting` in one guarded statement, all in one
    /// transaction committed before this returns — before anything is spawned.
    ///
    /// A run that is no longer queued (claimed, cancelled) is left out of the result, so a second
    /// claim of one run hands back nothing (a run handed out twice would be started twice). A
    /// claim is also left out when its project has no free seat (as many active runs as the
    /// request's `max_parallel`; each active run holds a distinct seat below it, under a unique
    /// index), when its project or namespace is paused ([`Store::pause`]), or when the
    /// database refuses its row ([`StoreError::is_refused_row`](crate::StoreError::is_refused_row):
    /// another program's constraint or trigger; that claim alone is rolled back, logged at
    /// WARN, and the run stays queued). Claims carry `epoch` and are refused as
    /// [`StoreError::Fenced`](crate::StoreError::Fenced) when it is not the current one.
    ///
    /// Errors: busy database (nothing was claimed; retry on a later EVAL), fencing.
    pub fn claim(
        &self,
        epoch: i64,
        requests: &[ClaimRequest],
        now: Millis,
    ) -> Result<Vec<Claimed>> {
        let mut refused = Vec::new();
        let claimed = self.claim_noting_refusals(epoch, requests, now, &mut refused)?;
        for r in refused {
            tracing::warn!(run = r.run_id, reason = %r.reason, "claim refused by the database (a constraint or a trigger); the run stays queued");
        }
        Ok(claimed)
    }

    /// [`Store::claim`], with the claims the database refused (a constraint, or a trigger of
    /// another program: see [`ClaimRefusal`]) appended to `refused` instead of logged, so that
    /// the caller can hold those runs back for a while instead of asking for them, and warning,
    /// at every EVAL. The other claims of the batch are made as usual.
    ///
    /// Errors: as [`Store::claim`].
    pub fn claim_noting_refusals(
        &self,
        epoch: i64,
        requests: &[ClaimRequest],
        now: Millis,
        refused: &mut Vec<ClaimRefusal>,
    ) -> Result<Vec<Claimed>> {
        match &self.backend {
            Backend::Sqlite(db) => db.claim(epoch, requests, now, refused),
            Backend::Postgres(db) => db.claim(epoch, requests, now, refused),
        }
    }

    /// The best `limit` queued runs of `project` that may start at `now` (not delayed past
    /// it; milliseconds since the Unix epoch, UTC), in queue order (priority, then id): the extra
    /// candidates of a project with several free seats. Costs one index walk of at most `limit`
    /// ready rows (plus the project's delayed ones).
    pub fn queue_of(&self, project: &str, now: Millis, limit: u32) -> Result<Vec<QueueHead>> {
        match &self.backend {
            Backend::Sqlite(db) => db.queue_of(project, now, limit),
            Backend::Postgres(db) => db.queue_of(project, now, limit),
        }
    }

    /// Every project that has runs: its queued and active counts and its latest ended run, by
    /// project name. Reads the whole runs table (for `fleet projects`, never for an EVAL).
    pub fn project_activity(&self) -> Result<Vec<ProjectActivity>> {
        match &self.backend {
            Backend::Sqlite(db) => db.project_activity(),
            Backend::Postgres(db) => db.project_activity(),
        }
    }

    /// Pauses the project or namespace `name` from `now` (milliseconds since the Unix epoch,
    /// UTC), recording `by` (who asked). Returns false when it was paused already (the first
    /// pause's time and author stay). Does not check that `name` exists: the caller does, against
    /// the config. While paused, [`Store::claim`] claims none of its runs and
    /// [`Store::fire_schedule`] records its occurrences as skipped.
    ///
    /// Errors: busy database (nothing was written).
    pub fn pause(&self, kind: HoldKind, name: &str, by: Option<&str>, now: Millis) -> Result<bool> {
        match &self.backend {
            Backend::Sqlite(db) => db.pause(kind, name, by, now),
            Backend::Postgres(db) => db.pause(kind, name, by, now),
        }
    }

    /// Ends the pause of the project or namespace `name`. Returns false when it was not paused.
    ///
    /// Errors: busy database (nothing was written).
    pub fn resume(&self, kind: HoldKind, name: &str) -> Result<bool> {
        match &self.backend {
            Backend::Sqlite(db) => db.resume(kind, name),
            Backend::Postgres(db) => db.resume(kind, name),
        }
    }

    /// The pauses in force, by kind then name.
    pub fn paused(&self) -> Result<Pauses> {
        match &self.backend {
            Backend::Sqlite(db) => db.paused(),
            Backend::Postgres(db) => db.paused(),
        }
    }

    /// Applies transitions of active runs in one transaction (the reap of an EVAL). Each is
    /// checked against the state machine and the run's current claim token; one that no longer
    /// fits is skipped, not failed, so a batch is never blocked by one stale entry.
    ///
    /// A run whose cancel was requested gets no retry, even when its transition asks for one,
    /// and its end carries a note saying how the request and the end relate (stopped by it;
    /// requested after the end; too late to stop it; or, for `cancelled` with no request, a
    /// stop from outside fleet). The status is always the one the transition names.
    ///
    /// Errors: busy database (nothing was written; the caller keeps the batch and retries),
    /// fencing, and [`StoreError::IllegalTransition`](crate::StoreError::IllegalTransition) for
    /// a change the state machine forbids from a non-terminal status (a bug in the caller).
    pub fn apply(
        &self,
        epoch: i64,
        transitions: &[Transition],
        now: Millis,
    ) -> Result<Vec<Applied>> {
        self.apply_with_hooks(epoch, transitions, &FailureHooks::new(), now)
    }

    /// [`Store::apply`], and for each run that ends `failed`, `timed_out` or `lost` with no
    /// retry queued, one run of the hook `hooks` names for its project (trigger `on_failure`,
    /// `hook_of` = the failed run), inserted in the same transaction as the end: a crash can
    /// neither lose it nor queue it twice, since the end is written once. A run that is itself
    /// a hook's (or a retry of one: `hook_of` set) never queues another. Its id is in
    /// [`Applied::Done::hook`](crate::Applied::Done). Errors: as [`Store::apply`].
    pub fn apply_with_hooks(
        &self,
        epoch: i64,
        transitions: &[Transition],
        hooks: &FailureHooks,
        now: Millis,
    ) -> Result<Vec<Applied>> {
        match &self.backend {
            Backend::Sqlite(db) => db.apply(epoch, transitions, hooks, now),
            Backend::Postgres(db) => db.apply(epoch, transitions, hooks, now),
        }
    }

    /// `fleet cancel`: a queued run becomes `cancelled` at once; an active one gets its cancel
    /// flag set (with the instant and `reason` of the first request, kept apart from the run's
    /// note), and stays active until the daemon has stopped it (a status describes the world,
    /// never an intention); from then on it gets no retry. Errors:
    /// [`StoreError::UnknownRun`](crate::StoreError::UnknownRun), busy.
    pub fn request_cancel(&self, id: RunId, reason: &str, now: Millis) -> Result<CancelOutcome> {
        match &self.backend {
            Backend::Sqlite(db) => db.request_cancel(id, reason, now),
            Backend::Postgres(db) => db.request_cancel(id, reason, now),
        }
    }

    /// Cancels, in one transaction, those of `ids` that are still queued, with `reason`; returns
    /// the ids it cancelled. A run claimed or ended meanwhile is left alone. It takes a list of
    /// runs read beforehand, never "every queued run of a project": a run queued after the caller
    /// decided (by a command that read a newer config) must not be swept up with them.
    pub fn cancel_queued_runs(
        &self,
        ids: &[RunId],
        reason: &str,
        now: Millis,
    ) -> Result<Vec<RunId>> {
        match &self.backend {
            Backend::Sqlite(db) => db.cancel_queued_runs(ids, reason, now),
            Backend::Postgres(db) => db.cancel_queued_runs(ids, reason, now),
        }
    }

    /// The next attempt of `run`: the retry queued when it ended, if any. A retry is inserted in
    /// the same transaction that ends the run it retries, so an ended run with no next attempt
    /// is the end of its chain (what `fleet wait` follows).
    ///
    /// Cost: one index seek. Errors: busy, backend.
    pub fn next_attempt(&self, run: &Run) -> Result<Option<Run>> {
        match &self.backend {
            Backend::Sqlite(db) => db.next_attempt(run),
            Backend::Postgres(db) => db.next_attempt(run),
        }
    }

    /// Bulk `fleet cancel`: every run the selection names that has not ended — only the queued
    /// ones with `queued_only` — in one transaction. A queued run becomes `cancelled` at once;
    /// an active one gets its cancel flag (as [`Store::request_cancel`]) and the daemon stops
    /// it. Returns what it did to each run, in id order (empty when nothing matched).
    ///
    /// Errors: busy (nothing written), backend.
    pub fn cancel_selected(
        &self,
        selection: &CancelSelection,
        queued_only: bool,
        reason: &str,
        now: Millis,
    ) -> Result<Vec<BulkCancelled>> {
        match &self.backend {
            Backend::Sqlite(db) => db.cancel_selected(selection, queued_only, reason, now),
            Backend::Postgres(db) => db.cancel_selected(selection, queued_only, reason, now),
        }
    }

    /// Projects that have queued runs (for spotting runs of projects no longer in the config).
    pub fn queued_projects(&self) -> Result<Vec<String>> {
        match &self.backend {
            Backend::Sqlite(db) => db.queued_projects(),
            Backend::Postgres(db) => db.queued_projects(),
        }
    }

    /// Every event with `seq > after`, oldest first.
    ///
    /// Errors: [`StoreError::Corrupt`](crate::StoreError::Corrupt) for an event whose status
    /// this version does not know.
    pub fn events_after(&self, after: i64) -> Result<Vec<Event>> {
        match &self.backend {
            Backend::Sqlite(db) => db.events_after(after),
            Backend::Postgres(db) => db.events_after(after),
        }
    }

    /// Every schedule cursor, by project name.
    pub fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        match &self.backend {
            Backend::Sqlite(db) => db.schedules(),
            Backend::Postgres(db) => db.schedules(),
        }
    }

    /// Advances one schedule: inserts the occurrence's run (or the record of its skip) and moves
    /// the cursor, in one transaction. The run insert is under the unique key (project,
    /// occurrence), so an occurrence already handled is never handled twice, whatever the caller
    /// computed. When the stored cursor is not `req.expected_cursor`, nothing is written
    /// ([`Fired::written`] is false).
    ///
    /// Errors: busy database (nothing written; the next EVAL computes the same step again),
    /// fencing.
    pub fn fire_schedule(&self, epoch: i64, req: &FireRequest, now: Millis) -> Result<Fired> {
        match &self.backend {
            Backend::Sqlite(db) => db.fire_schedule(epoch, req, now),
            Backend::Postgres(db) => db.fire_schedule(epoch, req, now),
        }
    }

    /// How many runs ended, per project and terminal status, since the database was created
    /// (pruning never lowers a total), with when the latest of each ended; by project, then
    /// status. For monitoring (`/metrics`).
    ///
    /// Cost: one row per (project, status) that ever ended, whatever the history's length.
    ///
    /// Errors: the database's; [`StoreError::Corrupt`](crate::StoreError::Corrupt) for a
    /// status this version does not know.
    pub fn ended_totals(&self) -> Result<Vec<EndedTotal>> {
        match &self.backend {
            Backend::Sqlite(db) => db.ended_totals(),
            Backend::Postgres(db) => db.ended_totals(),
        }
    }

    /// The queued runs per namespace (how many, when the oldest was queued, and when the oldest
    /// of those ready at `now` ([`Millis`], UTC) became ready), by namespace; namespaces with
    /// nothing queued are left out. For monitoring (`/metrics`, the dashboard).
    ///
    /// Cost: in proportion to the queue's length (an index walk), never to the history.
    ///
    /// Errors: the database's.
    pub fn queue_summary(&self, now: Millis) -> Result<Vec<QueueSummary>> {
        match &self.backend {
            Backend::Sqlite(db) => db.queue_summary(now),
            Backend::Postgres(db) => db.queue_summary(now),
        }
    }
}

/// Tells whether anything was committed to the database since it last looked — by this
/// process's other connections or by any other program. A look reads a counter and takes no
/// lock, so it costs microseconds however large the database is.
///
/// Why: the daemon's backstop tick (for writers that never nudge it) would otherwise run a
/// full EVAL every second on an idle install; with this it runs one only when something changed.
pub struct ChangeProbe {
    probe: Probe,
}

/// The backend's probe behind a [`ChangeProbe`], one variant per [`Backend`].
enum Probe {
    /// SQLite's `PRAGMA data_version`, on a connection of its own.
    Sqlite(SqliteProbe),
    /// PostgreSQL's notices on the change channel (`LISTEN`), on a connection of its own.
    Postgres(PgProbe),
}

impl ChangeProbe {
    /// True if a commit happened since the previous call (always true on the first call).
    ///
    /// Errors: the database's, if it cannot be read.
    pub fn changed(&mut self) -> Result<bool> {
        match &mut self.probe {
            Probe::Sqlite(p) => p.changed(),
            Probe::Postgres(p) => p.changed(),
        }
    }
}
