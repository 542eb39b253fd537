//! Opening a SQLite database: the connection settings (pragmas), the migrations to the latest
//! schema, the pool, and the change probe's connection of its own.
//!
//! Every connection the backend uses is set up by the one `init` here, so no statement ever runs
//! on a connection without the busy timeout or with a weaker `synchronous`. Nothing here reads
//! or writes runs.

use std::path::Path;
use std::time::{Duration, Instant};

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::Connection;

use super::{is_busy, schema, SqliteStore};
use crate::error::Result;
use crate::StoreError;

/// Sets up one connection, from the pool or not.
fn set_up(c: &mut Connection, busy_timeout: Duration) -> rusqlite::Result<()> {
    c.busy_timeout(busy_timeout)?;
    // Every statement the daemon uses stays prepared (the default of 16 is fewer than
    // the store's statements, so an EVAL kept re-preparing the ones it evicted).
    c.set_prepared_statement_cache_capacity(64);
    // FULL: a committed claim or transition survives power loss, not only a crash — every
    // state change must be durable before the side effect it licenses (a claim before its
    // spawn), or a restart after power loss could start the run again.
    // cache_size: 16 MiB of pages per connection instead of SQLite's 2 MiB. The EVAL reads
    // the queue_heads table, but a claim, an enqueue and a delayed head each seek in
    // runs_queue, whose pages (500, 2 MiB, at 100,000 queued runs) a smaller cache would
    // re-read from the file. Pages are cached only as they are read: a small database uses
    // little of it.
    // temp_store: SQLite's statement journals (a claim's savepoint keeps the pages it changes
    // in one) stay in memory instead of spilling, past 64 KiB, into a file it creates in
    // /var/tmp (or $TMPDIR): a claim or an end must not fail because a folder outside the
    // state directory is full, read-only or missing. What they hold is bounded by one
    // transaction's pages.
    c.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
         PRAGMA cache_size = -16384; PRAGMA temp_store = MEMORY;",
    )
}

/// On a new database (no table yet), chooses incremental vacuum: the pages pruning frees then
/// go back to the file system in small steps (`reclaim_space`), never in one long VACUUM. The
/// setting must come before the first table and before the switch to WAL; on a database that
/// has tables it is left alone (an older one is converted by `enable_incremental_vacuum`).
fn incremental_vacuum_if_new(c: &Connection) -> rusqlite::Result<()> {
    let tables: i64 = c.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))?;
    if tables == 0 {
        c.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")?;
    }
    Ok(())
}

/// Why the database at `path` cannot be opened, when the file system says it plainly: SQLite
/// only says "unable to open database file", which does not tell a missing file from one in a
/// folder this user may not look into. Looks with `stat` only: opening the file to find out
/// would close a descriptor on it, and closing any descriptor on a SQLite database drops the
/// POSIX locks this process's other connections hold on it. `None` when `stat` sees nothing
/// wrong.
fn why_not(path: &Path) -> Option<Box<dyn std::error::Error + Send + Sync>> {
    let e = std::fs::metadata(path).err()?;
    (e.kind() == std::io::ErrorKind::PermissionDenied).then(|| Box::new(e) as _)
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path`, in WAL mode with the given busy
    /// timeout, and brings its schema up to date.
    ///
    /// Errors: [`StoreError::Open`] when the file cannot be opened or created, or the migration
    /// fails (for instance a database written by a newer fleet).
    pub(crate) fn open(path: &Path, busy_timeout: Duration) -> Result<SqliteStore> {
        let open_err = |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Open {
            path: path.to_path_buf(),
            source: e,
        };
        let busy = Duration::from_millis(busy_timeout.as_millis() as u64);
        let init = move |c: &mut Connection| set_up(c, busy);
        // One plain connection first: a file that is not a database, or a place where none can
        // be created, fails here at once with SQLite's own words, instead of after the pool's
        // connection timeout.
        // SQLite can answer "busy" here without waiting in its busy handler (another connection
        // is switching the file to WAL or recovering it): that passes, so it is retried until
        // the busy timeout; any other error is final.
        let deadline = Instant::now() + busy_timeout;
        let mut conn = loop {
            let attempt = Connection::open(path)
                .and_then(|c| incremental_vacuum_if_new(&c).map(|()| c))
                .and_then(|mut c| init(&mut c).map(|()| c));
            match attempt {
                Ok(c) => break c,
                Err(e) if is_busy(&e) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(open_err(why_not(path).unwrap_or_else(|| Box::new(e)))),
            }
        };
        // A newer fleet's database: refused before any migration step, so that nothing of this
        // version is written over a schema it does not know.
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| open_err(Box::new(e)))?;
        let known = schema::known_version();
        if found > known {
            return Err(open_err(Box::new(StoreError::SchemaTooNew {
                found,
                known,
            })));
        }
        // A version fleet never writes (another program set it): migrating from there would
        // fail on tables that exist, with the migration's whole SQL for a message.
        let has_runs: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs')",
                [],
                |r| r.get(0),
            )
            .map_err(|e| open_err(Box::new(e)))?;
        if found < 0 || (found == 0 && has_runs) {
            return Err(open_err(
                format!(
                    "its schema version (PRAGMA user_version) is {found}, which fleet never \
                     writes{}: another program changed it; restore the database from a backup",
                    if has_runs {
                        " for a database with its tables"
                    } else {
                        ""
                    }
                )
                .into(),
            ));
        }
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
        Ok(SqliteStore {
            pool,
            path: path.to_path_buf(),
        })
    }

    /// A change probe on this database: a new connection, outside the pool.
    ///
    /// Errors: [`StoreError::Backend`] if the database cannot be opened.
    pub(crate) fn change_probe(&self) -> Result<SqliteProbe> {
        Ok(SqliteProbe {
            conn: Connection::open(&self.path)?,
            last: None,
        })
    }
}

/// The change probe of [`crate::ChangeProbe`] for SQLite: a connection of its own that reads
/// `PRAGMA data_version`, a counter SQLite moves on every commit made through any other
/// connection, this process's or another program's. It takes no lock, so a look costs
/// microseconds however large the database is.
pub(crate) struct SqliteProbe {
    conn: Connection,
    last: Option<i64>,
}

impl SqliteProbe {
    /// True if a commit happened since the previous call (always true on the first call).
    ///
    /// Errors: SQLite's, if the database cannot be read.
    pub(crate) fn changed(&mut self) -> Result<bool> {
        let now: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        let changed = self.last != Some(now);
        self.last = Some(now);
        Ok(changed)
    }
}
