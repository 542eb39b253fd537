//! The PostgreSQL backend: one database shared by any number of connections and hosts, reached
//! through an r2d2 pool of synchronous `postgres` clients. What it is for: several hosts
//! sharing one queue, one set of caps and one history. Every operation of [`crate::Store`] has
//! a PostgreSQL arm with the same promise, and the store's tests run on both backends.
//!
//! It owns every SQL statement for PostgreSQL and is, with `sqlite`, the only code that names a
//! driver. It must never be reached except through [`crate::Store`], and must never hand a
//! client, a statement or a row out of the crate.
//!
//! How it keeps the store's guarantees under PostgreSQL's READ COMMITTED, where two
//! transactions on different connections run truly at once (SQLite has one writer at a time):
//! - The claim is one guarded `UPDATE … WHERE id = $1 AND status = 'queued' RETURNING …`: of two
//!   transactions claiming one run, the second waits for the first's row lock, re-reads the row,
//!   finds it no longer queued and matches nothing. Before its transaction, a claim locks the
//!   runs it asks for with `FOR UPDATE SKIP LOCKED`: a run another claimer is claiming at that
//!   moment is left to it, so two claim batches naming the same runs in different orders never
//!   deadlock on them.
//! - Caps are seats (`cap_seats`, below): the claim takes one seat of each cap in its own
//!   transaction, and the end of the run frees them in the transaction that ends it. Counting
//!   active runs and then claiming would let two claimers both see room.
//! - The partial unique index `runs_one_active_per_project` refuses a second active run of a
//!   project on one seat; each claim runs under a savepoint so that this refusal skips one run,
//!   not the batch.
//! - Writes that need the epoch read the host row holding it `FOR SHARE`, so a take-over or a
//!   forget of that host waits for them and they wait for one in progress: the same order
//!   SQLite's one write lock gives, per host (hosts of different names never wait on each
//!   other).
//! - Transitions lock their run (`FOR UPDATE`) before checking it against the state machine, so
//!   two writers cannot both pass the check; a schedule's step holds an advisory lock on its
//!   project, so two hosts firing one schedule at once are served one after the other.
//! - Busy: a lock not granted within the busy timeout (`lock_timeout`), a deadlock, or a
//!   serialisation failure. Each rolls the whole transaction back; the conversions here decide it
//!   ([`is_busy`]), and which failures are a row's own refusal ([`is_refused`]).
//!
//! Files, one per concern, as in `sqlite`: `open` (pool, migrations or the read-only check,
//! change probe), `timed`
//! (the pool's check-out test, bounded in time), `schema`, `runs`, `claim`, `transitions`,
//! `events`, `eval`, `daemon` (take over, fencing), `hosts` (heartbeats, forget, the published
//! config, log tails), `operator`, `paused`, `prune`, `activity`, `schedules`, `clock`,
//! `counts`, `summary` (the monitoring reads), `url` (a URL cut as the driver cuts it, its
//! password masked), `tls` (libpq's TLS settings read and taken out of the connection string,
//! the connector and its certificate checks).
//!
//! # What is neutral, what it supplies
//!
//! The decisions are [`crate::decide`]'s, shared with SQLite: the transition plan (and so the
//! end's note, the retry and the failure hook), a schedule step's queue/skip/replace, prune
//! eligibility, the caps a claim must find room under, a cancel by status, a stepped-back
//! clock's delay, the run columns' meaning. This backend supplies what differs: its
//! transactions and locks (the run row `FOR UPDATE` read before the transition is planned, the
//! advisory lock around a schedule step, the savepoint per claim), its SQL dialect, its row
//! reading, and the cap seats (a transition's `free_seats` frees them; SQLite's seats live on
//! the run row, so its `free_seats` does nothing). Nothing here imports from the SQLite
//! backend.
//!
//! # Client: `postgres` and `r2d2_postgres`
//!
//! The synchronous client, pooled by r2d2, is the same shape as the SQLite backend (`rusqlite`
//! and `r2d2_sqlite`): every `Store` method already blocks and async callers already run it on
//! a blocking thread, so an async client would only be wrapped back into blocking calls, and
//! would bring a runtime into the store. `postgres` is `tokio-postgres` run on a small private
//! runtime; closing a client on a thread that drives an async runtime panics, so the pool and
//! the change probe close theirs on a thread of their own ([`PoolOwner`], the probe's `Drop`).
//! Every connection goes through one rustls connector built at open from libpq's TLS settings
//! (`tls`: `sslmode`, `sslrootcert`, `sslcert`, `sslkey`). The first connection is bounded
//! (30 s, connect, log in and migrate), every connection has TCP keepalives and a TCP user timeout, pooled
//! ones a `statement_timeout` (30 s) and the busy timeout as `lock_timeout`: a server that does
//! not answer fails an operation instead of blocking it. The pool (at most 4 connections) tests
//! a connection at check-out with a round trip bounded to 5 s (`timed`) and drops a broken one,
//! so a connection that died with the server is replaced, never reused; a check-out waits at
//! most 5 s, and the pool's own connection errors are not logged (the caller reports them once).
//!
//! # Migrations
//!
//! A list of their own (`schema::ALL`), the version in a `schema_version` table (one row per
//! migration applied). `schema::migrate` first reads the version, taking no lock: a schema
//! already current is left as it is, so a role that may read and write fleet's tables but not
//! create any (an operator's) opens it. Otherwise it runs the migrations in ONE transaction
//! holding `pg_advisory_xact_lock(0x00666c656574)`: two hosts starting at once queue on the
//! lock, and the second finds the schema current.
//!
//! A store opened for reading only (`PgStore::open_read_only`, the commands that only read)
//! never migrates: it reads the version, refuses a schema that is not this build's
//! (`decide::schema`), and runs every session, the change probe's included, with
//! `default_transaction_read_only = on`. Everything those commands run is a plain `SELECT` (or
//! the probe's `LISTEN`): no row lock, advisory lock or temporary table, so a role with only
//! `SELECT` on fleet's tables is enough. A database at a version newer than the build knows is
//! refused ([`StoreError::SchemaTooNew`]). Version 1 (`schema.sql`) has the SQLite schema's
//! tables (ids are identities; `project` compares as bytes with `COLLATE "C"`, so that "project
//! name order" is the same on both), plus `cap_seats` and the change triggers.
//!
//! # Caps are seats
//!
//! On SQLite one write lock serialises every claim, so the claim counts the active runs of the
//! request's namespace and in all, and refuses a claim whose cap is full: exact. Here two claims
//! run at once, and two counts can both see room. So a cap is seat rows `(kind, name, seat)`:
//! `kind` `global` (name empty), `namespace` (its name) or `host` (the claiming host's name,
//! when its `[hosts.NAME] max_concurrency` is set: `ClaimRequest::host_cap`), seats `0 ..
//! cap-1`, each made once (free: `run_id` NULL) and only as far as claims may need it: before
//! its transaction a claim makes, in seat order, the seats up to twice those held and wanted,
//! plus 64, at most the cap — so a cap of a million costs the rows its busiest moment needed
//! (`claim::provide_seats`). The claim takes the lowest free seat of each cap in its
//! transaction (`UPDATE … WHERE (kind, name, seat) = (SELECT … FOR UPDATE SKIP LOCKED)`): a seat
//! another transaction is taking is skipped, not waited for, and a seat taken by a transaction
//! that committed since is re-read and skipped too, so no seat is ever held twice and the seats
//! held never outnumber the cap. The transaction that moves a run out of `starting`/`running`
//! (an end, a requeue, or a forget, all through the same `apply_one`) frees all its seats,
//! under the run's row lock: exactly once. A claim whose cap has no free seat is rolled back
//! alone (its savepoint) and its run stays queued. A project's `max_parallel` is the partial
//! unique index on `(project, seat)`, as on SQLite: the claim picks the lowest project seat no
//! committed active run holds (read from the project's active runs, so `max_parallel` itself
//! costs nothing); two claims that pick the same one at once are told apart by the index.
//!
//! *The lowered-cap rule.* A seat may be taken only when no seat of that cap at or above the cap
//! is held (besides the count of held seats). Without it, two claims racing after a cap was
//! lowered (neither sees the other's uncommitted seat) both saw room and took two distinct free
//! seats below the new cap, reaching the old cap. With it, once the runs above the new cap have
//! ended every held seat is below the cap and distinct, so the seats held never outnumber it.
//! The price: no start under that cap until the runs on the high seats end, even if fewer runs
//! than the new cap are active.
//!
//! # Queue heads under READ COMMITTED
//!
//! The `queue_heads` table is kept by a row trigger, as on SQLite; but two transactions
//! changing one project's queue at once would each compute the head from a snapshot without the
//! other's change, and the later commit would leave a head that is not first, or no longer
//! queued (the project then starves until its queue changes again). So the trigger first takes
//! a transaction-long advisory lock on the project (`hashtextextended('fleet queue head ' ||
//! project, 0)`), and computes the head in the next statement, whose fresh snapshot sees every
//! writer that held the lock before. The claim takes the locks of all the projects it claims
//! from up front, in name order, so two claim batches never deadlock on them; a deadlock with
//! another writer (a bulk cancel over several projects) is broken by PostgreSQL and reported
//! busy, and the whole transaction is retried. The trigger writes a project's row only when its
//! head may have changed: rewriting it at every change would leave a dead row version per
//! change that every later rewrite in the same transaction steps over (queueing 100,000 runs of
//! a project in one statement took over ten minutes).
//!
//! # Where it differs from SQLite, and what each difference means for callers
//!
//! | | SQLite | PostgreSQL |
//! | --- | --- | --- |
//! | busy ([`StoreError::is_busy`]) | `SQLITE_BUSY`/`SQLITE_LOCKED` after the busy timeout | `lock_not_available` (the busy timeout is the connection's `lock_timeout`), `deadlock_detected`, `serialization_failure`; each rolled the whole transaction back |
//! | readers and writers | one writer at a time (`BEGIN IMMEDIATE`); readers never blocked (WAL) | writers run at once; row locks where they meet: the host row `FOR SHARE` in every fenced write (a take-over's update waits for them), the run row `FOR UPDATE` in transitions and `request_cancel`, an advisory lock per project in a schedule step and in the queue-head trigger |
//! | caps | counted in the claim, under the write lock | seats (above); a claim may find a cap full for a moment while another transaction holds a seat it is about to free |
//! | a cap lowered while runs hold seats at or above it | exact (a count) | no seat of that cap is taken until those runs end (the lowered-cap rule): never more than the new cap, even with claims racing |
//! | epoch | the newest take-over writes (one host per state directory) | one per host row: two hosts never fence each other; a take-over or a forget of a host fences only that host's previous daemon |
//! | host capacity | counted over `runs.host` = the claimer in the claim | seats of kind `host` |
//! | change probe | `PRAGMA data_version` | `LISTEN fleet_changes` on a connection of its own; a statement-level trigger on `runs`, `meta`, `schedules`, `paused` and `published_config` (not `hosts`: heartbeats must not wake every EVAL) sends `pg_notify` on every change, delivered at commit. A look runs an empty query bounded to 5 s and reads the notices that arrived. `NOTIFY` takes a database-wide lock at commit, which serialises the commits that notify (docs/PERFORMANCE.md) |
//! | `events.seq` | the commit order | taken at insert: a reader may see seq 12 before seq 11 commits. `fleet check` reads them all and is not affected; a reader that resumes from the highest seq seen must allow for it |
//! | run ids | `AUTOINCREMENT`, never reused | an identity (a sequence), never reused; a rolled-back insert leaves a gap |
//! | statements | prepared once per connection (statement cache) | prepared at each call (one more round trip) |
//!
//! # The database lost while the daemon runs
//!
//! The conversions here classify ([`is_lost`]): a socket that failed or closed, SQLSTATE class
//! 08, 57P01/57P02/57P03 are [`StoreError::Unreachable`]; so is a pool that timed out while
//! holding fewer connections than its maximum (it was free to open one and could not), while a
//! full pool stays [`StoreError::Backend`]; a lock timeout, deadlock or serialisation failure
//! stays busy. What the daemon does meanwhile (nothing claimed, nothing ended, the exits kept
//! and written once it is back) is the supervisor's `daemon::outage`. SQLite never builds
//! `Unreachable`.
//!
//! # Many hosts
//!
//! - *The `hosts` table and per-host epochs.* One row per host name: its epoch, pid, start,
//!   heartbeat, fleet version, the published config version it applies, its local fleet.toml's
//!   digest, its HTTP address as bound, whether and by whom it was forgotten, its caps and last
//!   reload error. The one counter `meta.epoch` stays: every take-over and every forget takes
//!   its next value, so an epoch names one incarnation of one host. `daemon::check_epoch` passes
//!   iff a host row holds the caller's epoch and is not forgotten, and returns that host's name;
//!   the refusal, [`StoreError::Fenced`], tells a forgotten host (which rejoins) from one whose
//!   name another daemon took over (which stops). The rule is `decide::hosts::fence`. Active
//!   runs claimed before hosts existed (`runs.host` NULL) become the first taking-over host's,
//!   in its take-over's transaction (on SQLite every active run becomes the taker's: one state
//!   directory is one host).
//! - *The published config.* `published_config` holds one row: version, digest, text, when, by
//!   which host. `Store::publish_config` is fenced, takes the row's lock (`FOR UPDATE`), and
//!   bumps the version unless the digest is the one published. A claim's requests may carry the
//!   version their caps came from (`ClaimRequest::config_version`); the claim then reads the row
//!   `FOR SHARE` (so a publish waits for it, and later claims see the publish) and claims
//!   NOTHING when the versions differ ([`StoreError::StaleConfig`], neither busy nor fenced).
//!   With every claimer on the published version, and the lowered-cap rule, no cap is exceeded
//!   while a change propagates: a claim counts against the caps of the version in force or does
//!   not happen. When a daemon publishes and applies is the supervisor's (`daemon::hosts`);
//!   what is published, the file with its `database` password masked, is `config::published`.
//! - *Forget* (`Store::forget_host`): one transaction bumps the host's epoch, marks it
//!   forgotten, and ends each of its active runs `lost` through `apply_one` with the retry the
//!   caller's policy chose and the failure hooks in force. A host already forgotten is refused
//!   ([`StoreError::AlreadyForgotten`]) and nothing is written. Its seats are freed there, once;
//!   a later write from the forgotten epoch is refused.
//! - *Log tails* (`run_log_tails`): the last 64 KiB of an ended run's log, stored by its host's
//!   daemon (fenced) after the end, deleted with the run by the prune.
//!
//! `fleet check` on a shared database reads every host's events and rows, and reports cap seats
//! out of step with their runs (`Store::seat_problems`). Not there yet: host caps in its replay
//! of the events (claim events do not record the claiming host's cap).
//!
//! # Seen red
//!
//! With the seats replaced by a count of active runs in the same transaction (the obvious
//! design), `postgres::concurrent_claims_never_exceed_a_cap` fails on every run; with the seats
//! never freed, `postgres::a_full_cap_refuses_the_claim_until_a_run_ends` fails; without the
//! lowered-cap rule, `postgres::a_lowered_cap_is_never_exceeded` fails; without the advisory
//! lock around the migrations,
//! `postgres::a_new_database_opened_by_several_stores_at_once_is_migrated_once` fails; without
//! the run's row lock in a transition,
//! `postgres::one_end_applied_by_several_stores_is_applied_once` applies the end five or six
//! times; without the per-project advisory lock of a schedule step,
//! `postgres::one_occurrence_fired_by_several_stores_makes_one_run` fails on the unique key
//! (the store's tests, `crates/store/tests/`). With the migration taking its lock and creating
//! `schema_version` on a current schema too (no version read first),
//! `pg_read_only::a_role_that_may_not_create_opens_a_current_schema_to_write` and
//! `pg_read_only::a_role_that_may_only_select_reads_and_is_refused_writes` fail on `permission
//! denied for schema public`; without `default_transaction_read_only` on a read-only store's
//! sessions, `pg_read_only::a_read_only_store_reads_and_cannot_write` writes its run.

mod activity;
mod claim;
mod clock;
mod counts;
mod daemon;
mod eval;
mod events;
mod hosts;
pub(crate) mod open;
mod operator;
mod paused;
mod prune;
mod runs;
mod schedules;
mod schema;
mod summary;
mod timed;
mod tls;
mod transitions;
pub(crate) mod url;

use postgres::error::SqlState;

use crate::error::Result;
use crate::StoreError;

/// The pooled connection type.
type Conn = r2d2::PooledConnection<timed::TimedManager>;

/// The PostgreSQL backend of one database. Cheap to clone; all clones share one pool.
#[derive(Clone)]
pub(crate) struct PgStore {
    pool: std::sync::Arc<PoolOwner>,
    /// The connection settings, for connections outside the pool (the change probe). Shared,
    /// so that a clone of the store stays as small as the SQLite backend's.
    config: std::sync::Arc<postgres::Config>,
    /// The TLS connector of every connection (its CA, client certificate and key read once,
    /// at open): the change probe's too.
    tls: tls::Connector,
}

impl PgStore {
    /// A connection from the pool. Errors: [`StoreError::Backend`] (not busy) when none frees
    /// up within the pool's connection timeout.
    ///
    /// [`StoreError::Unreachable`] instead when the pool holds fewer connections than its
    /// maximum: it was free to open one and could not, so the server cannot be reached (a pool
    /// whose connections are all in use is full, not cut off). A pooled connection that died
    /// with the server is tested at check-out and replaced, never handed out again.
    fn conn(&self) -> Result<Conn> {
        let pool = self.pool.pool.as_ref().expect("the pool lives until drop");
        pool.get().map_err(|e| {
            if pool.state().connections < pool.max_size() {
                StoreError::Unreachable {
                    context: "database connection pool",
                    source: Box::new(e),
                }
            } else {
                StoreError::from(e)
            }
        })
    }
}

type Pool = r2d2::Pool<timed::TimedManager>;

/// Owns the pool so that its connections are closed on a thread of their own. Closing a
/// `postgres` client runs a small runtime of the driver's, which panics ("cannot start a
/// runtime from within a runtime") on a thread that drives an async runtime — and the last
/// clone of a store may well be dropped there (the daemon's, when it stops).
pub(crate) struct PoolOwner {
    pool: Option<Pool>,
}

impl PoolOwner {
    /// Takes ownership of `pool`.
    pub(crate) fn new(pool: Pool) -> PoolOwner {
        PoolOwner { pool: Some(pool) }
    }
}

impl Drop for PoolOwner {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            // Joined, so that the connections are closed (the server told) before the caller
            // goes on; a thread that cannot start leaves them to the process's exit.
            if let Ok(closer) = std::thread::Builder::new()
                .name("fleet-pg-close".into())
                .spawn(move || drop(pool))
            {
                let _ = closer.join();
            }
        }
    }
}

/// A failed statement, busy when PostgreSQL said a lock could not be had in time, a deadlock was
/// broken, or a serialisation failed. Its message is `database: <PostgreSQL's>`.
/// A connection lost or refused (`is_lost`) is [`StoreError::Unreachable`] instead.
impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> StoreError {
        if is_lost(&e) {
            return StoreError::Unreachable {
                context: "database",
                source: Box::new(PgError(e)),
            };
        }
        StoreError::Backend {
            context: "database",
            busy: is_busy(&e),
            refused: is_refused(&e),
            source: Box::new(PgError(e)),
        }
    }
}

/// The driver's error, shown with the server's own words: `postgres::Error` alone displays
/// only "db error" and keeps PostgreSQL's message in its source.
#[derive(Debug)]
pub(crate) struct PgError(postgres::Error);

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A TLS failure said for what it is (expired, unknown issuer, name mismatch), instead
        // of the driver's "error performing TLS handshake" and the library's terse words.
        if let Some(why) = tls::explain(&self.0) {
            return f.write_str(&why);
        }
        match self.0.as_db_error() {
            Some(db) => write!(f, "{db} (SQLSTATE {})", db.code().code()),
            // The driver's own words ("error connecting to server", "db error") say nothing
            // of why: add its cause (connection refused, password authentication failed…).
            None => match std::error::Error::source(&self.0) {
                Some(cause) => write!(f, "{}: {cause}", self.0),
                None => write!(f, "{}", self.0),
            },
        }
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The retryable failures: the transaction was rolled back whole, and the same work may succeed
/// later. `lock_not_available` is what `lock_timeout` (the busy timeout) raises.
fn is_busy(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE
            || *c == SqlState::T_R_DEADLOCK_DETECTED
            || *c == SqlState::T_R_SERIALIZATION_FAILURE
    )
}

/// The failures of the connection rather than of the statement: the socket failed or closed
/// (no SQLSTATE, an I/O error underneath), the server refused or dropped the session
/// (class 08, connection exception), or it is shutting down, crashed, or still starting
/// (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now). The same work may
/// succeed once the server is back; a pooled connection that saw one is broken and replaced.
fn is_lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(c) => {
            c.code().starts_with("08")
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
        }
        None => std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// True when a write broke a unique index (the claim reads it as the one-active-run rule).
fn is_unique_violation(e: &postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// The constraint (or index) a write broke, as PostgreSQL names it, when `e` is such a
/// refusal from this backend.
fn broken_constraint(e: &StoreError) -> Option<&str> {
    let StoreError::Backend { source, .. } = e else {
        return None;
    };
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
    while let Some(err) = next {
        if let Some(pg) = err.downcast_ref::<postgres::Error>() {
            return pg.as_db_error().and_then(|d| d.constraint());
        }
        next = err.source();
    }
    None
}

/// Whether `e` is the database refusing a row ([`StoreError::is_refused_row`]): a constraint
/// (class 23: unique, check, foreign key, not null, exclusion) or an exception a trigger raised
/// (`RAISE EXCEPTION`, P0001), as another program's rules on the tables would.
fn is_refused(e: &postgres::Error) -> bool {
    e.code()
        .is_some_and(|c| c.code().starts_with("23") || c == &SqlState::RAISE_EXCEPTION)
}
