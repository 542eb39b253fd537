//! The PostgreSQL backend: one database shared by any number of connections and hosts, reached
//! through an r2d2 pool of synchronous `postgres` clients.
//!
//! It owns every SQL statement for PostgreSQL and is, with `sqlite`, the only code that names a
//! driver. It must never be reached except through [`crate::Store`], and must never hand a
//! client, a statement or a row out of the crate.
//!
//! How it keeps the store's guarantees under PostgreSQL's READ COMMITTED, where two
//! transactions on different connections run truly at once (SQLite has one writer at a time):
//! - The claim is one guarded `UPDATE … WHERE id = $1 AND status = 'queued' RETURNING …`: of two
//!   transactions claiming one run, the second waits for the first's row lock, re-reads the row,
//!   finds it no longer queued and matches nothing.
//! - Caps are seats (`cap_seats`, see `schema`): the claim takes one seat of each cap under a
//!   primary key in its own transaction, and the end of the run frees them in the transaction
//!   that ends it. Counting active runs and then claiming would let two claimers both see room.
//! - The partial unique index `runs_one_active_per_project` refuses a second active run of a
//!   project; each claim runs under a savepoint so that this refusal skips one run, not the batch.
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
//! Files, one per concern, as in `sqlite`: `open` (pool, migrations, change probe), `schema`,
//! `runs`, `claim`, `transitions`, `events`, `eval`, `daemon` (take over, fencing), `hosts`
//! (heartbeats, forget, the published config, log tails), `operator`, `paused`, `prune`,
//! `activity`, `schedules`, `clock`, `summary` (the monitoring reads), `url` (a URL cut as the
//! driver cuts it, its password masked).
//!
//! The decisions are [`crate::decide`]'s, shared with SQLite; nothing here imports from the
//! SQLite backend.

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
struct PgError(postgres::Error);

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
