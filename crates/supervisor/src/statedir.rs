//! The state directory: where fleet.db, the run files, the daemon lock and the control socket live,
//! and the exclusive lock that makes one daemon the one runner of an install.
//!
//! It owns paths and the daemon lock only: it must never read or write a run's files (that is
//! `shim::rundir`) nor hold the database beyond opening it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use store::Store;

use crate::sys::{files, process};

/// Errors about the state directory and its daemon lock.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// The directory could not be created or given mode 0700.
    #[error("state directory {}: {source}", path.display())]
    Unusable {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// Another daemon holds the state directory: one runner per install, or two daemons would
    /// each believe a schedule occurrence theirs to handle.
    #[error("another fleet daemon (pid {}) holds the state directory {}", pid.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into()), path.display())]
    Held {
        /// The holder's pid as it wrote it in the lock file, if readable.
        pid: Option<i32>,
        /// The state directory.
        path: PathBuf,
    },
    /// The database could not be opened.
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

/// Paths inside one state directory. Creating it is explicit ([`StateDir::ensure`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The state directory at `root` (absolute, as the config resolved it). No I/O.
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
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

    /// Creates the directory (and parents) if missing and makes it mode 0700: run logs and the
    /// database are the operator's business alone.
    ///
    /// Errors: [`StateDirError::Unusable`] naming the directory.
    pub fn ensure(&self) -> Result<(), StateDirError> {
        let unusable = |source| StateDirError::Unusable {
            path: self.root.clone(),
            source,
        };
        if self.root.exists() && !self.root.is_dir() {
            return Err(unusable(io::Error::new(
                io::ErrorKind::NotADirectory,
                "exists and is not a directory",
            )));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(unusable)?;
        let meta = std::fs::metadata(&self.root).map_err(unusable)?;
        if meta.permissions().mode() & 0o777 != 0o700 {
            std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700))
                .map_err(unusable)?;
        }
        // A directory we cannot write is found now, with its name, not at the first claim.
        let probe = self.root.join(".probe");
        File::create(&probe).map_err(unusable)?;
        let _ = std::fs::remove_file(probe);
        Ok(())
    }

    /// Opens the database, creating the directory first. Errors name the directory or file.
    pub fn open_store(&self) -> Result<Store, StateDirError> {
        self.ensure()?;
        Ok(Store::open(&self.db_path(), store::DEFAULT_BUSY_TIMEOUT)?)
    }

    /// Opens the database only if it exists (read-only commands must not create a state
    /// directory as a side effect). `Ok(None)` when there is no database yet.
    pub fn open_existing_store(&self) -> Result<Option<Store>, StateDirError> {
        if !self.db_path().exists() {
            return Ok(None);
        }
        Ok(Some(Store::open(
            &self.db_path(),
            store::DEFAULT_BUSY_TIMEOUT,
        )?))
    }

    /// Takes the exclusive daemon lock without waiting, and writes this process's pid into it.
    /// The lock lasts as long as the returned value (the kernel drops it if the process dies).
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
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(unusable)?;
        // A daemon killed while it was forking a shim leaves, for a moment, a child that holds a
        // copy of the lock until its exec closes it (close-on-exec acts at exec, not at fork).
        // So a lock held while the daemon named in the file is dead is waited for, briefly;
        // a lock held by a live daemon is refused at once.
        let deadline = std::time::Instant::now() + HOLDER_GONE_WAIT;
        while !files::try_lock_exclusive(&file).map_err(unusable)? {
            let holder = self.daemon_holder().ok().flatten();
            if holder.is_some() || std::time::Instant::now() >= deadline {
                let mut text = String::new();
                file.rewind().map_err(unusable)?;
                let _ = file.read_to_string(&mut text);
                return Err(StateDirError::Held {
                    pid: text.split_whitespace().next().and_then(|p| p.parse().ok()),
                    path: self.root.clone(),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        file.set_len(0).map_err(unusable)?;
        file.rewind().map_err(unusable)?;
        // pid and start time: `daemon_holder` recognises the holder without touching the lock.
        let pid = std::process::id() as i32;
        let start = process::start_time(pid).unwrap_or(0);
        writeln!(file, "{pid} {start}").map_err(unusable)?;
        file.sync_all().map_err(unusable)?;
        Ok(DaemonLock { _file: file })
    }

    /// The pid of the daemon holding this state directory, or `None` when no daemon holds it.
    ///
    /// Read-only, and it never touches the lock: a probe that took the lock even for an instant
    /// could make a daemon starting at that instant believe the directory held. The lock file
    /// names the holder's pid and start time; the holder is alive when that very process is.
    pub fn daemon_holder(&self) -> io::Result<Option<i32>> {
        let text = match std::fs::read_to_string(self.lock_path()) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut parts = text.split_whitespace().map(|p| p.parse::<u64>().ok());
        let (Some(Some(pid)), Some(Some(start))) = (parts.next(), parts.next()) else {
            return Ok(None);
        };
        let pid = pid as i32;
        Ok((process::start_time(pid) == Some(start)).then_some(pid))
    }
}

/// How long [`StateDir::lock_daemon`] waits for a lock whose daemon is dead (a child it was
/// forking still holds a copy until its exec).
pub const HOLDER_GONE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The held daemon lock. Dropping it releases the state directory.
#[derive(Debug)]
pub struct DaemonLock {
    _file: File,
}
