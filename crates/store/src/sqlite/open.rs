//! Opening a SQLite database: the connection settings (pragmas), the migrations to the latest
//! schema, the pool, and the change probe's connection of its own.
//!
//! Every connection the backend uses is set up by the one `init` here, so no statement ever runs
//! on a connection without the busy timeout or with a weaker `synchronous`. Nothing here reads
//! or writes runs.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

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

/// Whether `e` is one of SQLite's I/O errors (`SQLITE_IOERR` and its extended codes).
fn is_io(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::SystemIoFailure)
}

/// The schema version and whether the `runs` table exists, read in one statement (one
/// snapshot).
const VERSION_AND_RUNS: &str = "SELECT (SELECT user_version FROM pragma_user_version), \
     EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs')";

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
        // The version and the tables in one statement, so one snapshot: another process may
        // be creating the schema meanwhile, and two reads could see its version before its
        // commit and its tables after.
        let (found, has_runs): (i64, bool) = conn
            .query_row(VERSION_AND_RUNS, [], |r| Ok((r.get(0)?, r.get(1)?)))
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
            read_only: None,
        })
    }

    /// Opens the database at `path` for reading only: nothing is created, migrated or written,
    /// and neither the database nor its folder need be writable. `Ok(None)` when the file holds
    /// no schema yet (an empty file: nothing was ever queued).
    ///
    /// SQLite reads a database in WAL mode through its write-ahead log and shared memory
    /// (`-wal`, `-shm`), which a reader creates when they are missing. So:
    /// - where nothing can change the database — a read-only file system, or a folder that
    ///   grants nobody write access — and no committed transaction waits in a `-wal`, it is
    ///   read as it is (SQLite's `immutable`), creating nothing;
    /// - otherwise it is read as any reader does (`mode=ro`), beside whatever writes it; the
    ///   `-wal` and `-shm` files the read had to create are removed once the store is dropped,
    ///   if by then no other connection has the database open (they are SQLite's to remove
    ///   when the last connection closes, which a read-only one does not do).
    ///
    /// Errors: [`StoreError::Open`] when the file cannot be opened or read, and for a schema
    /// this build does not read as it is: a newer one ([`StoreError::SchemaTooNew`]), an older
    /// one (a command that writes, or the daemon, brings it up to date), or a version fleet
    /// never writes.
    pub(crate) fn open_read_only(
        path: &Path,
        busy_timeout: Duration,
    ) -> Result<Option<SqliteStore>> {
        let open_err = |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Open {
            path: path.to_path_buf(),
            source: e,
        };
        let (wal, shm) = (sibling(path, "-wal"), sibling(path, "-shm"));
        let journal = sibling(path, "-journal");
        let frozen = cannot_change(path) && wal_is_empty(&wal);
        let had = (exists(&wal), exists(&shm));
        let (target, flags) = if frozen {
            (
                PathBuf::from(immutable_uri(path)),
                OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
        } else {
            (
                path.to_path_buf(),
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
        };
        // Removes what this read creates, whether it succeeds or not (dropped last).
        let left = (!frozen).then(|| {
            Arc::new(LeftBehind {
                wal: (!had.0).then(|| wal.clone()),
                shm: (!had.1).then(|| shm.clone()),
                db: path.to_path_buf(),
            })
        });
        let busy = Duration::from_millis(busy_timeout.as_millis() as u64);
        let init = move |c: &mut Connection| set_up_reader(c, busy);
        let deadline = Instant::now() + busy_timeout;
        let (conn, found, tables) = loop {
            // The version and the tables in one statement, one snapshot (see `open`): a daemon
            // may be creating the schema.
            let attempt = Connection::open_with_flags(&target, flags)
                .and_then(|mut c| init(&mut c).map(|()| c))
                .and_then(|c| {
                    let (found, tables): (i64, i64) = c.query_row(
                        "SELECT (SELECT user_version FROM pragma_user_version), \
                                (SELECT COUNT(*) FROM sqlite_master WHERE type = 'table')",
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )?;
                    Ok((c, found, tables))
                });
            match attempt {
                Ok(read) => break read,
                // A reader that cannot take part in WAL mode alone (no `-shm` yet) sees an I/O
                // error while the process creating the database switches it to WAL: looked at
                // again, as for busy, until the timeout. A lasting one is reported then.
                // A transaction a killed writer left unfinished, its journal still to be
                // undone, which only a writer may do. One that undoes to an empty file (the
                // first writer of a new database killed while switching it to WAL) leaves
                // nothing to read. Otherwise a writer starting (a daemon) undoes it at once:
                // waited for as for busy, then said plainly.
                Err(e) if is_left_unfinished(&e) && undoes_to_nothing(&journal) => return Ok(None),
                Err(e)
                    if (is_busy(&e) || is_io(&e) || is_left_unfinished(&e))
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) if is_left_unfinished(&e) => {
                    return Err(open_err(
                        format!(
                            "a transaction left unfinished by a writer that was killed waits in \
                             {} to be undone, which a read cannot do: starting the daemon (or \
                             any command that writes) undoes it",
                            journal.display()
                        )
                        .into(),
                    ))
                }
                Err(e) => return Err(open_err(why_not(path).unwrap_or_else(|| Box::new(e)))),
            }
        };
        let known = schema::known_version();
        if found == 0 && tables == 0 {
            // An empty file (made private before SQLite first wrote it): nothing queued yet.
            return Ok(None);
        }
        if found <= 0 {
            return Err(open_err(
                format!(
                    "its schema version (PRAGMA user_version) is {found}, which fleet never \
                     writes for a database with its tables: another program changed it; \
                     restore the database from a backup"
                )
                .into(),
            ));
        }
        crate::decide::schema::for_reading(found, known).map_err(|e| open_err(Box::new(e)))?;
        drop(conn);
        let manager = SqliteConnectionManager::file(&target)
            .with_flags(flags)
            .with_init(init);
        // No idle connection kept or made ahead: each one is made when a read asks for it, so
        // that none is still being opened when the store is dropped.
        let pool = r2d2::Pool::builder()
            .max_size(4)
            .min_idle(Some(0))
            .connection_timeout(Duration::from_secs(30))
            .build(manager)
            .map_err(|e| open_err(Box::new(e)))?;
        Ok(Some(SqliteStore {
            pool,
            path: path.to_path_buf(),
            read_only: Some(ReadOnly {
                target,
                flags,
                left,
            }),
        }))
    }

    /// A change probe on this database: a new connection, outside the pool (opened for reading
    /// only when the store was).
    ///
    /// Errors: [`StoreError::Backend`] if the database cannot be opened.
    pub(crate) fn change_probe(&self) -> Result<SqliteProbe> {
        let conn = match &self.read_only {
            None => Connection::open(&self.path)?,
            Some(ro) => Connection::open_with_flags(&ro.target, ro.flags)?,
        };
        Ok(SqliteProbe {
            conn,
            last: None,
            _left: self.read_only.as_ref().and_then(|ro| ro.left.clone()),
        })
    }
}

/// How a store opened by [`SqliteStore::open_read_only`] makes its connections, and what it
/// removes once the last of them is closed.
#[derive(Clone)]
pub(crate) struct ReadOnly {
    /// The file, or the `file:` URI that opens it immutable.
    target: PathBuf,
    flags: OpenFlags,
    /// The `-wal` and `-shm` files this store's reads had to create (held by the store and
    /// its change probes; removed when the last of them is dropped).
    left: Option<Arc<LeftBehind>>,
}

/// Sets up a connection of a read-only store: the busy timeout and cache of [`set_up`], no
/// setting that writes, and `query_only` so that no statement can.
fn set_up_reader(c: &mut Connection, busy_timeout: Duration) -> rusqlite::Result<()> {
    c.busy_timeout(busy_timeout)?;
    c.set_prepared_statement_cache_capacity(64);
    c.execute_batch(
        "PRAGMA query_only = 1; PRAGMA cache_size = -16384; PRAGMA temp_store = MEMORY;",
    )
}

/// Whether a read failed because a rollback journal must be undone first, which a read-only
/// connection may not do (`SQLITE_READONLY_ROLLBACK`).
fn is_left_unfinished(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_READONLY_ROLLBACK)
}

/// Whether the rollback journal at `journal` undoes its database to an empty file: its header
/// (SQLite's file format: eight magic bytes, then at byte 16 the size in pages the database
/// had before the transaction, big-endian) says it held no page. Anything else, or a journal
/// that cannot be read, is not.
fn undoes_to_nothing(journal: &Path) -> bool {
    const MAGIC: [u8; 8] = [0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7];
    let mut header = [0u8; 20];
    let read = std::fs::File::open(journal).and_then(|f| {
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut header, 0)
    });
    read.is_ok() && header[..8] == MAGIC && header[16..20] == [0, 0, 0, 0]
}

/// `path` with `suffix` appended to its name (SQLite's `-wal` and `-shm`).
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// Whether something is at `path` (a file that cannot be looked at counts as there: it is not
/// this reader's to remove).
fn exists(path: &Path) -> bool {
    !matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// Whether the write-ahead log at `wal` holds nothing: missing, or empty. Then the database
/// file alone holds every committed transaction.
fn wal_is_empty(wal: &Path) -> bool {
    match std::fs::symlink_metadata(wal) {
        Ok(meta) => meta.len() == 0,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Whether nothing can write the database at `path` while it is read: its folder is on a
/// read-only file system, or grants nobody write access (no `w` in its mode: no writer can
/// make the `-wal` a write needs). Root ignores modes, but a daemon refuses a state directory
/// it cannot write into, and a folder nobody may write is a copy put aside, not a live one.
fn cannot_change(path: &Path) -> bool {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let read_only_fs = rustix::fs::statvfs(dir)
        .is_ok_and(|v| v.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
    let nobody_writes = std::fs::metadata(dir).is_ok_and(|m| m.mode() & 0o222 == 0);
    read_only_fs || nobody_writes
}

/// The `file:` URI that opens `path` read-only and immutable: SQLite then takes no lock and
/// reads the file alone, creating nothing. Every byte of the path but the unreserved ones is
/// percent-encoded, so that a `?`, `#` or `%` in it stays part of the path.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// The `-wal` and `-shm` files a read-only store had to create (SQLite makes them for any
/// connection to a database in WAL mode, and only a connection that may write removes them
/// when it is the last to close). Dropped once every connection of the store is closed: it
/// removes them then, as the last connection would have, if the database is not open anywhere
/// else and its write-ahead log holds nothing.
pub(crate) struct LeftBehind {
    wal: Option<PathBuf>,
    shm: Option<PathBuf>,
    db: PathBuf,
}

impl Drop for LeftBehind {
    fn drop(&mut self) {
        if self.wal.is_none() && self.shm.is_none() {
            return;
        }
        // Every connection holds a shared lock on the database file (SQLite's POSIX locks)
        // for as long as it is open, and takes one before it opens the `-wal` and `-shm`.
        // An exclusive lock on the whole file, taken without waiting, says that none is open,
        // and keeps any from opening (they wait on it as on any writer) until it is let go.
        // Needs the database writable; otherwise the files stay (nothing is lost: the next
        // connection uses them).
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.db)
        else {
            return;
        };
        if rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .is_err()
        {
            return;
        }
        let wal_empty = self.wal.as_deref().is_none_or(wal_is_empty);
        if wal_empty {
            for path in [&self.wal, &self.shm].into_iter().flatten() {
                let _ = std::fs::remove_file(path);
            }
        }
        // Closing the file lets the lock go.
        drop(file);
    }
}

/// The change probe of [`crate::ChangeProbe`] for SQLite: a connection of its own that reads
/// `PRAGMA data_version`, a counter SQLite moves on every commit made through any other
/// connection, this process's or another program's. It takes no lock, so a look costs
/// microseconds however large the database is.
pub(crate) struct SqliteProbe {
    conn: Connection,
    last: Option<i64>,
    /// Of a read-only store: what its reads created stays until this probe is closed too.
    _left: Option<Arc<LeftBehind>>,
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
