//! The SQLite backend: one state directory's database file, reached through an r2d2 pool.
//!
//! It owns every SQL statement for SQLite and is the only code in the project that uses
//! `rusqlite`. It must never be reached except through [`crate::Store`], and must never hand a
//! connection, a statement or a row out of the crate: callers see the row types of the crate
//! root only.
//!
//! How it keeps the store's guarantees, and why:
//! - Writes run in `BEGIN IMMEDIATE` transactions: the write lock is taken up front, so a
//!   transaction never fails half-way on an upgrade from reader to writer.
//! - The claim is one guarded `UPDATE … WHERE id = ? AND status = 'queued' RETURNING …`,
//!   committed before the call returns (a run that stays `queued` while its worker starts could
//!   be handed out again).
//! - The partial unique index `runs_one_active_per_project (project, seat)` makes two active runs
//!   of one project on one seat impossible to write, and the claim only hands out seats below
//!   the project's `max_parallel`, whatever a packer decides.
//! - `SQLITE_BUSY`/`SQLITE_LOCKED` after the busy timeout is the retryable failure, and a
//!   constraint or a value that does not fit its column is a row's own refusal: the
//!   conversions into [`StoreError::Backend`] here decide both ([`is_busy`], [`is_refused`]),
//!   so that the crate's error type never names `rusqlite` or `r2d2`.
//!
//! Files, one per concern: `open` (pool, pragmas, migrations, change probe), `schema` (the
//! migrations), `runs` (enqueue, read, cancel), `claim`, `transitions` (apply), `events`,
//! `eval` (the EVAL's read queries and the occupancy count), `paused` (pause and resume),
//! `activity` (per-project summaries), `daemon` (take over, epoch, fencing), `hosts`
//! (heartbeats, the host list, forgetting a host, the published config, log tails), `operator` (the
//! next attempt of a run, the bulk cancel), `prune` (retention: candidates, forgetting, giving
//! space back), `schedules`, `clock` (delays written by a clock that has since stepped back),
//! and `summary` (the monitoring reads).
//!
//! What those files write is decided in [`crate::decide`] (a transition's plan, a schedule
//! step, prune eligibility, claim caps, a cancel): they supply the reads and the SQL, never a
//! rule of their own that the PostgreSQL backend would have to repeat.

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
mod transitions;

use std::path::PathBuf;

use r2d2_sqlite::SqliteConnectionManager;

use crate::error::Result;
use crate::StoreError;

/// The SQLite backend of one database file. Cheap to clone; all clones share one pool.
#[derive(Clone)]
pub(crate) struct SqliteStore {
    // Declared first, dropped first: the pool's connections are closed before `read_only` may
    // remove the files they used.
    pool: r2d2::Pool<SqliteConnectionManager>,
    /// The database file, for connections outside the pool (the change probe).
    path: PathBuf,
    /// How a store opened for reading only makes its connections (`None`: it may write).
    read_only: Option<open::ReadOnly>,
}

impl SqliteStore {
    /// A connection from the pool. Errors: [`StoreError::Backend`] (not busy) when none frees
    /// up within the pool's connection timeout.
    fn conn(&self) -> Result<r2d2::PooledConnection<SqliteConnectionManager>> {
        Ok(self.pool.get()?)
    }
}

/// A failed statement, busy or refused when SQLite said so. Its message is `database:
/// <SQLite's>`.
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Backend {
            context: "database",
            busy: is_busy(&e),
            refused: is_refused(&e),
            source: Box::new(e),
        }
    }
}

/// No connection from the pool: never busy (the pool's own timeout has already been waited
/// out). Its message is `database connection pool: <r2d2's>`.
impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> StoreError {
        StoreError::Backend {
            context: "database connection pool",
            busy: false,
            refused: false,
            source: Box::new(e),
        }
    }
}

/// True for SQLite's `SQLITE_BUSY`/`SQLITE_LOCKED`: another connection held the lock past the
/// busy timeout, and the statement changed nothing.
fn is_busy(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(e, _) => matches!(
            e.code,
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
        ),
        _ => false,
    }
}

/// True when the failure is the rows' own ([`StoreError::is_refused_row`]): a write broke a
/// constraint ([`is_constraint_violation`]) or a value read does not fit its column
/// ([`is_unreadable_value`]). Busy is never refused.
fn is_refused(e: &rusqlite::Error) -> bool {
    is_constraint_violation(e) || is_unreadable_value(e)
}

/// True when a write broke a constraint, a trigger's `RAISE(ABORT, …)` included. The claim
/// skips such a run ([`is_unique_violation`] tells the seat index's refusal from the others);
/// firing an occurrence never reads it (an occurrence is handled only when its run row is
/// found, and a failed insert is an error, which [`StoreError::is_refused_row`] tells the
/// daemon is the project's own).
fn is_constraint_violation(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(e, _) if e.code == rusqlite::ErrorCode::ConstraintViolation
    )
}

/// True when a write broke a unique index (on a claim: the seat index, a second active run in
/// one seat of a project), rather than another constraint or a trigger.
fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
    )
}

/// Whether `e` is a value of the row that does not fit its column's type (a number out of
/// range, text where a number belongs), rather than a failure of the database.
fn is_unreadable_value(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::Utf8Error(..)
    )
}
