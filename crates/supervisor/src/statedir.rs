//! The state directory: where fleet.db, the run files, the daemon lock and the control socket live,
//! and the exclusive lock that makes one daemon the one runner of an install.
//!
//! It owns paths and the daemon lock only: it must never read or write a run's files (that is
//! `runrecord`) nor hold the database beyond opening it.
//!
//! Two rules run through it. Whether a daemon holds the directory is the lock's to say, never a
//! pid's: a daemon that died (even one its parent has not reaped yet, a zombie) holds no lock.
//! And a file that exists but cannot be read is never taken for a missing one: "permission
//! denied", naming the path, is a different answer from "nothing there yet".
//!
//! Nor does it change what it did not make: it creates its folders 0700 and the database 0600,
//! and never changes a mode afterwards; a state directory others may write into is refused to
//! what writes ([`StateDir::exposed`]), and a command that only reads opens the database
//! read-only, creating nothing. What it does create, run as root in a state directory that is
//! another user's (the package's `/var/lib/fleet`, the `fleet` user's), it gives to that user
//! and group at once (`files::open_or_create`, `files::give_to_folder_owner`): the daemon,
//! running as that user, must be able to open every file a command run as root made there.
//!
//! # The files
//!
//! ```text
//! <state_dir>/               mode 0700 when fleet makes it (StateDir::ensure); never
//! │                          re-permissioned, refused to writers if others may write into it
//! ├── fleet.db               SQLite, WAL mode, synchronous = FULL (plus its -wal and -shm
//! │                          files), 0600 from its first byte; absent with `database =`
//! │                          (PostgreSQL), where everything else below stays the same
//! ├── daemon.lock            flocked by the running daemon (close-on-exec: no shim or command
//! │                          inherits it); holds its pid and start time, then its host name
//! │                          and, on a shared database, its target (no password)
//! ├── daemon.sock            the daemon's control socket: nudges ("eval", "reload") and the
//! │                          one request with an answer, "health"; bound after the takeover
//! ├── boot                   the last 64 daemons' epochs and the kernel's boot id each ran in,
//! │                          made durable by each daemon before its first claim (written as
//! │                          boot.new, synced, renamed: crate::boot)
//! ├── prune.lock             flocked by a prune batch (the daemon's or `fleet prune`'s), so
//! │                          that two pruners take turns (crate::prune)
//! └── runs/                  mode 0700: every run's files, in record-slot segments
//!                            (records-<first id>), <id>.more, <id>.log and
//!                            <id>.log.compacting: their layout and format are runrecord's
//! ```
//!
//! The daemon keeps the device and inode of the directory, `fleet.db` and `daemon.lock` it
//! opened ([`StateDir::opened`]) and compares them at every tick ([`StateDir::check_opened`]):
//! one removed or replaced under it stops the loop ([`StateDirError::Replaced`]). Run ids are
//! never reused, because a run's files, named by its id alone, outlive its row.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use config::{Config, DatabaseUrl};
use store::Store;

use crate::sys::files;
use crate::sys::process::{self, Life};

/// Errors about the state directory and its daemon lock.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// The directory could not be created, or this user may not write into it.
    #[error("state directory {}: {source}{}", path.display(), files::whose(path, source))]
    Unusable {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The state directory or its database exists but this user may not use it (or it is not
    /// what fleet expects there): never taken for a missing one.
    #[error("{}: {source}{}", path.display(), files::whose(path, source))]
    Inaccessible {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// Another daemon holds the state directory: one runner per install, or two daemons would
    /// each believe a schedule occurrence theirs to handle.
    #[error("another fleet daemon (pid {}) holds the state directory {}{}", pid.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into()), path.display(), if *exiting { format!(": it is exiting, but has not let it go after {}s", EXITING_WAIT.as_secs()) } else { String::new() })]
    Held {
        /// The holder's pid as it wrote it in the lock file, if readable.
        pid: Option<i32>,
        /// The state directory.
        path: PathBuf,
        /// The holder was exiting, and still held the lock after [`EXITING_WAIT`].
        exiting: bool,
    },
    /// The state directory, its database or its daemon lock is no longer the file this daemon
    /// opened: removed, or replaced by another (a directory moved into its place, a copy of the
    /// database renamed over it, a restored backup). The daemon must stop: what it would write
    /// goes nowhere anyone reads, and another daemon may take what is there now.
    #[error("state directory {}: {what}", path.display())]
    Replaced {
        /// The state directory.
        path: PathBuf,
        /// What changed, in words.
        what: String,
    },
    /// Group or others may write into the state directory or its `runs/`: refused by the daemon
    /// and the commands that write, never re-permissioned.
    #[error("state directory {0}")]
    Exposed(Exposed),
    /// The database could not be opened.
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

impl StateDirError {
    /// True when the system refused this user access to a file of the state directory
    /// (permission denied): the action failed for this user, which is not bad input.
    pub fn is_permission_denied(&self) -> bool {
        match self {
            StateDirError::Unusable { source, .. } | StateDirError::Inaccessible { source, .. } => {
                source.kind() == io::ErrorKind::PermissionDenied
            }
            StateDirError::Store(e) => e.is_permission_denied(),
            StateDirError::Held { .. }
            | StateDirError::Replaced { .. }
            | StateDirError::Exposed(_) => false,
        }
    }
}

/// Paths inside one state directory. Creating it is explicit ([`StateDir::ensure`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
    /// The `database` key: where the store is when it is not `fleet.db` here.
    database: Option<DatabaseUrl>,
}

/// A folder of the state directory that someone besides its owner may write into: who could
/// replace the database, a run's records or its log, or plant a link in their place. The daemon
/// and the commands that write refuse such a state directory; the commands that only read warn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exposed {
    /// The folder: the state directory itself, or its `runs/`.
    pub path: PathBuf,
    /// Its mode (permission bits, with the sticky, setgid and setuid bits).
    pub mode: u32,
}

impl std::fmt::Display for Exposed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = match (self.mode & 0o020 != 0, self.mode & 0o002 != 0) {
            (true, true) => "its group and other users",
            (true, false) => "its group",
            _ => "other users",
        };
        write!(
            f,
            "{}: {who} may write into it (mode {:04o}); fleet keeps its database, run records and logs only where its own user alone may write, and never changes the mode of a folder: point state_dir at a folder of fleet's own (fleet creates it, mode 0700), or, if this folder is yours alone, remove their access (chmod go-w {})",
            self.path.display(),
            self.mode,
            self.path.display()
        )
    }
}

/// The mode of the folder at `path` when group or others may write into it; `None` when they
/// may not, or there is no such folder (nothing of fleet's is there to protect yet). Follows
/// symbolic links: a `state_dir` that is a link to a shared folder puts fleet's files in that
/// folder, whose mode is the one that matters.
fn writable_by_others(path: &Path) -> Option<u32> {
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.permissions().mode() & 0o7777;
    (meta.is_dir() && mode & 0o022 != 0).then_some(mode)
}

impl StateDir {
    /// The state directory at `root` (absolute, as the config resolved it). No I/O.
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir {
            root: root.into(),
            database: None,
        }
    }

    /// The state directory `config` names, with its store where the `database` key says (the
    /// only way the daemon and the commands pick a backend: they never ask which one it is).
    pub fn of(config: &Config) -> StateDir {
        StateDir::new(&config.state_dir).with_database(config.database.clone())
    }

    /// The same directory with its store in `database` (`None`: `fleet.db` in the directory).
    pub fn with_database(mut self, database: Option<DatabaseUrl>) -> StateDir {
        self.database = database;
        self
    }

    /// The PostgreSQL database holding the store, if the config names one.
    pub fn database(&self) -> Option<&DatabaseUrl> {
        self.database.as_ref()
    }

    /// Where the store is, for messages: the `fleet.db` path, or the PostgreSQL database (host,
    /// port, database, user; never the password).
    pub fn store_location(&self) -> String {
        match &self.database {
            Some(db) => db.target().to_string(),
            None => self.db_path().display().to_string(),
        }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<state_dir>/fleet.db`.
    pub fn db_path(&self) -> PathBuf {
        self.root.join("fleet.db")
    }

    /// `<state_dir>/daemon.lock`: held (flock) by the running daemon; holds its pid.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("daemon.lock")
    }

    /// `<state_dir>/daemon.sock`: the daemon's control socket (nudges: EVAL now, reload).
    pub fn socket_path(&self) -> PathBuf {
        self.root.join("daemon.sock")
    }

    /// The first folder of this state directory (itself, then its `runs/`) that group or others
    /// may write into, if any. Reads modes only; changes nothing.
    pub fn exposed(&self) -> Option<Exposed> {
        [self.root.clone(), self.root.join(runrecord::RUNS_DIR)]
            .into_iter()
            .find_map(|path| writable_by_others(&path).map(|mode| Exposed { path, mode }))
    }

    /// Refuses a state directory that group or others may write into ([`StateDir::exposed`]):
    /// for the daemon and the commands that write.
    fn refuse_exposed(&self) -> Result<(), StateDirError> {
        match self.exposed() {
            Some(exposed) => Err(StateDirError::Exposed(exposed)),
            None => Ok(()),
        }
    }

    /// Creates the directory (and parents) if missing, mode 0700: run logs and the database are
    /// the operator's business alone. A folder that exists is used as it is, never
    /// re-permissioned (fleet changes the mode of nothing it did not create), and refused when
    /// group or others may write into it or its `runs/` ([`StateDir::exposed`]).
    ///
    /// Errors: [`StateDirError::Unusable`] naming the directory; [`StateDirError::Exposed`].
    pub fn ensure(&self) -> Result<(), StateDirError> {
        let unusable = |source| StateDirError::Unusable {
            path: self.root.clone(),
            source,
        };
        // `Path::exists` says "no" for a directory it may not look into: ask, and keep the answer.
        match std::fs::metadata(&self.root) {
            Ok(meta) if !meta.is_dir() => {
                return Err(unusable(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "exists and is not a directory",
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(unusable(e)),
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(unusable)?;
        self.refuse_exposed()?;
        // A directory we cannot write is found now, with its name, not at the first claim
        // (asked of the kernel: nothing is created to find out).
        files::may_access(&self.root, true).map_err(unusable)?;
        // A new database is made private from its first byte (SQLite makes its files with the
        // umask's mode, and its write-ahead log and shared memory take the database's mode).
        // Run as root in a state directory that is another user's (the package's, the `fleet`
        // user's), the new file is that user's, as the daemon must be able to open it (SQLite,
        // run as root, gives its -wal and -shm files the database's owner itself).
        if self.database.is_none() {
            let created = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(self.db_path());
            if let Ok(file) = created {
                if let Err(source) = files::give_to_folder_owner(&file, &self.db_path()) {
                    let _ = std::fs::remove_file(self.db_path());
                    return Err(StateDirError::Unusable {
                        path: self.db_path(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Opens the database, creating the directory first. Errors name the directory or file: a
    /// database this user may not read and write is [`StateDirError::Inaccessible`] with
    /// "permission denied" ([`StateDirError::is_permission_denied`]).
    pub fn open_store(&self) -> Result<Store, StateDirError> {
        self.ensure()?;
        if let Some(db) = &self.database {
            return Ok(Store::open_postgres(
                db.secret_url(),
                store::DEFAULT_BUSY_TIMEOUT,
            )?);
        }
        self.may_use_db(true)?;
        Ok(Store::open(&self.db_path(), store::DEFAULT_BUSY_TIMEOUT)?)
    }

    /// Opens the database for reading, only if it exists: a command that only reads creates,
    /// changes and writes nothing in the state directory ([`Store::open_read_only`]: neither
    /// the directory nor the database need be writable, and a state directory on a read-only
    /// file system is read as it is). `Ok(None)` when there is no database yet — and only then:
    /// a database, or a state directory, this user may not read is an error naming it
    /// ("permission denied"), never an empty install. A PostgreSQL database is opened for
    /// reading only too ([`Store::open_postgres_read_only`]: its schema is checked, never
    /// created nor migrated, and nothing can be written through it, so a role with only
    /// `SELECT` on fleet's tables will do); one that cannot be reached, or whose schema is not
    /// this build's (older, newer, or none yet), is an error.
    pub fn open_existing_store(&self) -> Result<Option<Store>, StateDirError> {
        if let Some(db) = &self.database {
            return Ok(Some(Store::open_postgres_read_only(
                db.secret_url(),
                store::DEFAULT_BUSY_TIMEOUT,
            )?));
        }
        if !self.may_use_db(false)? {
            return Ok(None);
        }
        Ok(Store::open_read_only(
            &self.db_path(),
            store::DEFAULT_BUSY_TIMEOUT,
        )?)
    }

    /// Opens the database for a command that changes what is in it (`cancel`, `rerun`, `prune`,
    /// `hosts forget`), only if it exists: `Ok(None)` when there is none (nothing to change),
    /// and nothing is created then. A database this user may read but not write is an error
    /// naming it, before anything is done.
    pub fn open_existing_store_to_write(&self) -> Result<Option<Store>, StateDirError> {
        self.refuse_exposed()?;
        if let Some(db) = &self.database {
            return Ok(Some(Store::open_postgres(
                db.secret_url(),
                store::DEFAULT_BUSY_TIMEOUT,
            )?));
        }
        if !self.may_use_db(true)? {
            return Ok(None);
        }
        Ok(Some(Store::open(
            &self.db_path(),
            store::DEFAULT_BUSY_TIMEOUT,
        )?))
    }

    /// Whether fleet.db exists (`Ok(false)`: it does not), and this user may read it (and with
    /// `write`, write it). SQLite's own refusal only says "unable to open database file"; this
    /// says which file, and why.
    fn may_use_db(&self, write: bool) -> Result<bool, StateDirError> {
        let db = self.db_path();
        match files::may_access(&db, write) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            // `stat` needs only to pass through the folders: refused too, it is the state
            // directory itself that may not be entered, and that is the path to name.
            Err(source) => match std::fs::metadata(&db) {
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    Err(StateDirError::Inaccessible {
                        path: self.root.clone(),
                        source,
                    })
                }
                _ => Err(StateDirError::Inaccessible { path: db, source }),
            },
        }
    }

    /// Takes the exclusive daemon lock, and writes this process's pid into it. The lock lasts as
    /// long as the returned value (the kernel drops it if the process dies). A live daemon
    /// holding it is refused at once; a holder on its way out is waited for, a bounded time
    /// ([`EXITING_WAIT`] for a daemon whose exit is under way, [`HOLDER_GONE_WAIT`] otherwise).
    ///
    /// Errors: [`StateDirError::Held`] with the holder's pid when another daemon has it.
    pub fn lock_daemon(&self) -> Result<DaemonLock, StateDirError> {
        self.ensure()?;
        let path = self.lock_path();
        let unusable = |source| StateDirError::Unusable {
            path: path.clone(),
            source,
        };
        // std opens with O_CLOEXEC: shims and commands must never inherit the daemon lock, or a
        // crashed daemon's children would keep a new daemon out.
        // Created, it is the state directory owner's (fleet run as root in another user's).
        let file = files::open_or_create(&path, 0o600).map_err(unusable)?;
        // A lock held by a live daemon is refused at once. Everything else that holds it is on
        // its way to letting go, and is waited for, a bounded time:
        // - a daemon killed (or exiting) whose exit has not come as far as closing its files:
        //   certain to end, so waited for up to EXITING_WAIT;
        // - a daemon that died while it was forking a shim: the child holds a copy of the lock
        //   until its exec closes it (close-on-exec acts at exec, not at fork); and a daemon
        //   that took the lock but has not written its pid yet: up to HOLDER_GONE_WAIT.
        // (A probe of `fleet status` holds it for an instant too: it is looked at again.)
        // Each look reads the file once, and the answer given is the one that read decided on:
        // the holder may rewrite the file between two reads.
        let began = Instant::now();
        let mut said_exiting = false;
        while !files::try_lock_exclusive(&file).map_err(unusable)? {
            // The file, not the lock: `daemon_holder` would probe the lock this loop is taking.
            let holder = Holder::read(&file);
            let waited = began.elapsed();
            let refused = |exiting| StateDirError::Held {
                pid: holder.pid(),
                path: self.root.clone(),
                exiting,
            };
            match holder.life() {
                Some(Life::Running) => return Err(refused(false)),
                Some(Life::Exiting) => {
                    if waited >= EXITING_WAIT {
                        return Err(refused(true));
                    }
                    if !said_exiting {
                        said_exiting = true;
                        tracing::info!(
                            pid = holder.pid(),
                            state_dir = %self.root.display(),
                            "the daemon that holds the state directory is exiting; waiting for it to finish"
                        );
                    }
                }
                Some(Life::Gone) | None => {
                    if waited >= HOLDER_GONE_WAIT {
                        return Err(refused(false));
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // pid and start time: `daemon_holder` recognises the holder without touching the lock.
        let pid = std::process::id() as i32;
        let start = process::start_time(pid).unwrap_or(0);
        rewrite(&file, &format!("{pid} {start}\n")).map_err(unusable)?;
        file.sync_all().map_err(unusable)?;
        Ok(DaemonLock { file })
    }

    /// The host name the last daemon of this state directory ran as
    /// ([`DaemonLock::record_host`]), whether or not it still runs; `None` when no daemon has
    /// recorded one (none has run here yet, or one of an earlier version).
    pub fn recorded_host(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.lock_path()).ok()?;
        let name = text.split_whitespace().nth(2)?;
        config::valid_host_name(name).then(|| name.to_string())
    }

    /// The shared database the last daemon here used, as it recorded it
    /// ([`DaemonLock::record_host`]: its target, no password); `None` for SQLite, or when no
    /// daemon recorded one. Why: a command told only this folder (`--state-dir`), with a
    /// config that cannot be read, would otherwise read it as an install with no runs.
    pub fn recorded_database(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.lock_path()).ok()?;
        let rest: Vec<&str> = text.split_whitespace().skip(3).collect();
        (!rest.is_empty()).then(|| rest.join(" "))
    }

    /// The pid of the daemon holding this state directory, or `None` when no daemon holds it.
    ///
    /// The lock is the authority, not a pid: a daemon that died holds no lock, even while its
    /// parent has not reaped it (a zombie keeps its pid and start time, but the kernel dropped
    /// its locks when it exited). The probe takes no exclusive lock ([`files::is_locked_exclusively`]):
    /// it never keeps out a reader, and a daemon starting at that very instant looks again. The
    /// lock file names the holder's pid and start time; a held lock whose named process is not
    /// running yet (a daemon between taking the lock and writing its pid), is on its way out (a
    /// daemon killed, its exit not yet as far as closing its files), or no more (a child a dead
    /// daemon was forking keeps a copy until its exec), is looked at again for up to
    /// [`HOLDER_GONE_WAIT`]. Still held after that: the pid the file names (the lock says a
    /// daemon holds the directory, perhaps in another pid namespace, where its pid means
    /// nothing here).
    ///
    /// Errors: the lock file cannot be opened (permission denied: the caller names the file),
    /// or it stays held by a process that names no pid in it.
    pub fn daemon_holder(&self) -> io::Result<Option<i32>> {
        let file = match File::open(self.lock_path()) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // A folder (or anything else) in the lock's place can be flocked too, and would then
        // pass for a lock nobody holds: it is an unusable state directory, said as such.
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a regular file: the daemon lock cannot be read",
            ));
        }
        let deadline = Instant::now() + HOLDER_GONE_WAIT;
        loop {
            if !files::is_locked_exclusively(&file)? {
                return Ok(None);
            }
            // One read of the file per look: the answer is the one that read decided on.
            let holder = Holder::read(&file);
            if holder.life() == Some(Life::Running) {
                return Ok(holder.pid());
            }
            if Instant::now() >= deadline {
                return match holder.pid() {
                    Some(pid) => Ok(Some(pid)),
                    None => Err(io::Error::other(
                        "held by a process that does not name itself in it (not a fleet daemon?)",
                    )),
                };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Records what this daemon opened: the device and inode of the state directory, of
    /// fleet.db, and of the lock file `lock` holds. Call once the lock is held and the database
    /// open; [`StateDir::check_opened`] compares the paths with it later.
    ///
    /// Errors: [`StateDirError::Unusable`] naming the file that cannot be looked at.
    pub fn opened(&self, lock: &DaemonLock) -> Result<Opened, StateDirError> {
        let at = |path: PathBuf| {
            std::fs::metadata(&path)
                .map(|m| FileId::of(&m))
                .map_err(|source| StateDirError::Unusable { path, source })
        };
        Ok(Opened {
            root: at(self.root.clone())?,
            // On PostgreSQL there is no local database file to watch.
            db: match self.database {
                Some(_) => None,
                None => Some(at(self.db_path())?),
            },
            lock: lock
                .file
                .metadata()
                .map(|m| FileId::of(&m))
                .map_err(|source| StateDirError::Unusable {
                    path: self.lock_path(),
                    source,
                })?,
        })
    }

    /// Checks that the state directory, fleet.db and daemon.lock found at their paths now are
    /// still the ones in `opened` (same device and inode). A few `stat` calls: cheap enough for
    /// every tick.
    ///
    /// Errors: [`StateDirError::Replaced`] saying which was removed or replaced. A look that
    /// fails for any other reason than a missing file proves nothing, and passes: the next look
    /// tries again.
    pub fn check_opened(&self, opened: &Opened) -> Result<(), StateDirError> {
        let checks = [
            (self.root.clone(), Some(opened.root), "the state directory"),
            (self.db_path(), opened.db, "its database fleet.db"),
            (
                self.lock_path(),
                Some(opened.lock),
                "its daemon lock daemon.lock",
            ),
        ];
        for (path, was, name) in checks {
            let Some(was) = was else { continue };
            let what = match std::fs::metadata(&path) {
                Ok(m) if FileId::of(&m) == was => continue,
                Ok(_) => format!("{name} was replaced by another file since this daemon opened it"),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    format!("{name} was removed while this daemon used it")
                }
                Err(_) => continue,
            };
            return Err(StateDirError::Replaced {
                path: self.root.clone(),
                what,
            });
        }
        Ok(())
    }
}

/// The pid and start time the lock file names (the holder writes `PID START`), read through
/// `file`, so from the very file whose lock was probed. `None` if the file names none (a holder
/// that has not written it yet).
fn read_holder(file: &File) -> Option<(i32, u64)> {
    let mut buf = [0u8; 64];
    let n = file.read_at(&mut buf, 0).ok()?;
    // The host name and database after the pid may be cut inside a character here: only the
    // whole characters read count.
    let text = match std::str::from_utf8(&buf[..n]) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&buf[..e.valid_up_to()]).ok()?,
    };
    let mut parts = text.split_whitespace().map(|p| p.parse::<u64>().ok());
    let (Some(Some(pid)), Some(Some(start))) = (parts.next(), parts.next()) else {
        return None;
    };
    Some((i32::try_from(pid).ok()?, start))
}

/// What one read of the lock file says of the process holding the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Holder(Option<(i32, u64)>);

impl Holder {
    /// Reads the file once ([`read_holder`]); never the lock.
    fn read(file: &File) -> Holder {
        Holder(read_holder(file))
    }

    /// The pid the file names, if it names one.
    fn pid(self) -> Option<i32> {
        self.0.map(|(pid, _)| pid)
    }

    /// What became of the process the file names (same pid and start time); `None` when it
    /// names none (a holder that has not written it yet, or not a fleet daemon).
    fn life(self) -> Option<Life> {
        self.0.map(|(pid, start)| process::life(pid, start))
    }
}

/// Replaces the content of the lock file with `text` without ever leaving it empty or shorter
/// than both: written over the old content from the start, then cut to its length. A reader
/// sees the old record or the new one (the pid and start time come first, and a daemon only
/// adds to its own record), never an empty file to take for "nobody".
fn rewrite(file: &File, text: &str) -> io::Result<()> {
    file.write_all_at(text.as_bytes(), 0)?;
    file.set_len(text.len() as u64)
}

/// A file's device and inode: what it is, whatever path leads to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(meta: &Metadata) -> FileId {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// What a daemon opened, by device and inode: its state directory, fleet.db and daemon.lock
/// (see [`StateDir::opened`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    root: FileId,
    /// `None` on PostgreSQL: no local database file.
    db: Option<FileId>,
    lock: FileId,
}

/// How long [`StateDir::lock_daemon`] waits for a lock whose daemon is dead (a child it was
/// forking still holds a copy until its exec), or that names no daemon yet.
pub const HOLDER_GONE_WAIT: Duration = Duration::from_secs(3);

/// How long [`StateDir::lock_daemon`] waits for a lock whose daemon is exiting (killed, its
/// exit not yet as far as closing its files): its end is certain, but may be slow (a large
/// process's memory to free, a core dump to write).
pub const EXITING_WAIT: Duration = Duration::from_secs(30);

/// The held daemon lock. Dropping it releases the state directory.
#[derive(Debug)]
pub struct DaemonLock {
    file: File,
}

impl DaemonLock {
    /// Adds this daemon's host name to the lock file (after its pid and start time), where
    /// [`StateDir::recorded_host`] finds it — for the commands, which cannot know a name given
    /// by `fleet daemon --host`, and after the daemon is gone too: a state directory is one
    /// host's. With a shared database, its target follows (no password:
    /// [`config::DatabaseUrl::target`]), where [`StateDir::recorded_database`] finds
    /// it. Best effort: a failure leaves the commands with the config's name.
    pub fn record_host(&mut self, host: &str, database: Option<&str>) {
        let pid = std::process::id() as i32;
        let start = process::start_time(pid).unwrap_or(0);
        let database = database.map(|d| format!(" {d}")).unwrap_or_default();
        let _ = rewrite(&self.file, &format!("{pid} {start} {host}{database}\n"));
        // Not synced: a name lost to a machine crash is written again at the next start, and
        // the pid and start time the lock needs were synced when it was taken.
    }
}

#[cfg(test)]
mod tests;
