//! The run folder, `<state_dir>/runs/<run_id>/`: its records, its lock and its tombstones,
//! shared by the shim (which writes the records) and the daemon's recovery (which reads them,
//! and writes tombstones). It must never decide a run's fate: that is `settle`'s job, from what
//! these files say.
//!
//! These files are how a run's fate is known after a daemon crash:
//!
//! | file         | written by | when                                                    | durable |
//! | ------------ | ---------- | ------------------------------------------------------- | ------- |
//! | `lock`       | shim       | flocked (LOCK_EX) for the shim's whole life             | —       |
//! | `started`    | shim       | before the command is spawned                           | yes     |
//! | `running`    | shim       | right after the spawn (carries the command's pid)       | no      |
//! | `exit`       | shim       | after the command (its whole process group) is gone     | yes     |
//! | `tombstones` | recovery   | while holding the lock, before requeueing a claim       | yes     |
//! | `log`        | command    | its stdout and stderr, appended to by every claim       | —       |
//!
//! A run may be claimed more than once (requeued after a crash, same attempt), so every record
//! carries the claim's `token`: readers compare it and never mistake an earlier claim's file for
//! the current one.
//!
//! Why a lock file rather than a pid: the kernel drops an `flock` when its holder dies, so "the
//! lock is free" proves the shim is gone, and no reused pid can be mistaken for it.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::sys::files;

/// Name of the folder under the state directory that holds one folder per run.
pub const RUNS_DIR: &str = "runs";
/// The lock file: the shim holds an exclusive `flock` on it for its whole life.
pub const LOCK_FILE: &str = "lock";
/// The `started` record ([`StartedRecord`]).
pub const STARTED_FILE: &str = "started";
/// The `running` record ([`RunningRecord`]).
pub const RUNNING_FILE: &str = "running";
/// The `exit` record ([`ExitRecord`]).
pub const EXIT_FILE: &str = "exit";
/// The tombstones: one claim token per line.
pub const TOMBSTONES_FILE: &str = "tombstones";
/// The command's combined stdout and stderr.
pub const LOG_FILE: &str = "log";

/// Mode of `runs/` and of every run folder: the state directory is private (run logs and
/// records are the operator's business alone).
const DIR_MODE: u32 = 0o700;
/// Mode of every file the run folder holds.
pub(super) const FILE_MODE: u32 = 0o600;

/// Written by the shim, durably, after it took the lock and found no tombstone, and *before* it
/// spawns the command. Its absence (for this token, with the lock free) proves the command never
/// started, which is what lets recovery requeue the same attempt instead of calling it `lost`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedRecord {
    /// The claim this shim serves (see the module docs).
    pub token: u64,
    /// The shim's pid.
    pub shim_pid: i32,
    /// The shim's start time: field 22 of `/proc/<shim_pid>/stat`, in clock ticks since boot
    /// (0 if `/proc` could not be read). With `shim_pid` it identifies the shim without trusting
    /// a bare pid ("any process signalled by fleet is identified first").
    pub shim_start_time: u64,
    /// When the record was written, RFC 3339 UTC.
    pub at: String,
    /// The token of every claim whose shim wrote a started record in this folder, this one
    /// last. A run is one attempt, and a claim is requeued only when it provably never
    /// started, so more than one token here — or a tombstoned one — means the command was
    /// started twice: `fleet check` reports it. Carried in the record itself, so keeping this
    /// history costs no extra write.
    #[serde(default)]
    pub history: Vec<u64>,
}

/// Written by the shim right after the spawn (atomically, not fsynced: it is a convenience, the
/// `started`/`exit` records and the lock carry the guarantees).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningRecord {
    /// The claim this shim serves.
    pub token: u64,
    /// The command's pid, which is also its process group id (the shim starts it in its own
    /// group). Only the lock holder may signal it: while the shim lives it has not reaped the
    /// command, so the pid cannot have been reused.
    pub pid: i32,
    /// When the command was spawned, RFC 3339 UTC.
    pub at: String,
}

/// How the command ended, as recorded in [`ExitRecord::outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The command exited by itself with [`ExitRecord::code`].
    Exited,
    /// The command was killed by [`ExitRecord::signal`].
    Signalled,
    /// The command could not be started at all (missing program, bad cwd, permission);
    /// [`ExitRecord::error`] says why. Nothing ran.
    SpawnFailed,
}

/// Written by the shim, durably, once the command and its process group are gone, before the
/// shim releases the lock: "the lock is free and this file exists" means the real status is
/// known; "the lock is free, `started` exists and this file does not" means the fate is unknown
/// (`lost`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The claim this shim served.
    pub token: u64,
    /// How the command ended.
    pub outcome: Outcome,
    /// The exit code, when `outcome` is `exited`.
    pub code: Option<i32>,
    /// The signal number that killed the command, when `outcome` is `signalled`.
    pub signal: Option<i32>,
    /// The project's timeout expired and the shim began terminating the process group
    /// (SIGTERM, then SIGKILL after the kill grace). Only set when the timeout was the first
    /// reason to terminate.
    pub timed_out: bool,
    /// The shim received SIGTERM, SIGINT or SIGHUP (the daemon's cancel) while the command ran,
    /// and passed it on to the process group.
    pub term_requested: bool,
    /// Why the command could not be started (`spawn_failed` only); the same line is in the log.
    pub error: Option<String>,
    /// When the command was spawned, RFC 3339 UTC (`None` if it never was).
    pub started_at: Option<String>,
    /// When the shim saw the command end, RFC 3339 UTC.
    pub finished_at: String,
}

impl ExitRecord {
    /// `finished_at` as milliseconds since the Unix epoch (UTC); `None` if it does not parse.
    pub fn finished_ms(&self) -> Option<i64> {
        chrono::DateTime::parse_from_rfc3339(&self.finished_at)
            .ok()
            .map(|t| t.timestamp_millis())
    }
}

/// The folder of one run: `<state_dir>/runs/<run_id>/`. Creating a value does no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    path: PathBuf,
}

/// An exclusive `flock` on a run's lock file, released when dropped (or when the holding process
/// dies: the kernel drops it, which is why a free lock proves the shim is gone).
///
/// Methods that write a run's files take a `&RunLock` to prove the caller holds that run's lock.
#[derive(Debug)]
pub struct RunLock {
    file: File,
    dir: PathBuf,
}

impl RunLock {
    /// The run folder whose lock this is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Closing the file would release the lock anyway; unlocking explicitly first keeps the
        // release at this exact point even if the descriptor were ever shared.
        let _ = files::unlock(&self.file);
    }
}

impl RunDir {
    /// The folder of run `run_id` under `state_dir` (`<state_dir>/runs/<run_id>`). No I/O.
    pub fn new(state_dir: &Path, run_id: i64) -> RunDir {
        RunDir {
            path: state_dir.join(RUNS_DIR).join(run_id.to_string()),
        }
    }

    /// The run folder's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Path of the run's log (the command's stdout and stderr, every claim appended).
    pub fn log_path(&self) -> PathBuf {
        self.path.join(LOG_FILE)
    }

    /// `mkdir -p` of the run folder; every folder it creates (`runs/` included) gets mode 0700,
    /// since the state directory is private. Existing folders are left as they are.
    ///
    /// Errors: any I/O error from creating the folders.
    pub fn create(&self) -> io::Result<()> {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.path)
    }

    /// Takes the run's lock without waiting: `Ok(None)` if another open file description (another
    /// process, normally the shim) holds it. Creates the run folder and the lock file if missing,
    /// so that recovery can lock and tombstone a claim whose shim has not even created them yet.
    ///
    /// Errors: I/O errors creating or opening the folder or lock file, or from `flock`.
    pub fn try_lock(&self) -> io::Result<Option<RunLock>> {
        self.create()?;
        let file = self.open_lock_file(true)?;
        if files::try_lock_exclusive(&file)? {
            Ok(Some(self.lock_from(file)))
        } else {
            Ok(None)
        }
    }

    /// Takes the run's lock, waiting as long as another holder keeps it. Creates the run folder
    /// and the lock file if missing. The shim calls this before anything else it does in the run
    /// folder, and checks the tombstones right after: a shim that was late to lock may find its
    /// claim given up by recovery, and must then not start the command.
    ///
    /// Errors: I/O errors creating or opening the folder or lock file, or from `flock`.
    pub fn lock_blocking(&self) -> io::Result<RunLock> {
        self.create()?;
        let file = self.open_lock_file(true)?;
        files::lock_exclusive(&file)?;
        Ok(self.lock_from(file))
    }

    /// Whether the lock is held by another open file description — in practice, whether the
    /// run's shim is alive. Probes with a non-blocking `flock` and releases at once; creates
    /// nothing (a missing lock file means nobody holds it). Note: a [`RunLock`] held by the
    /// calling process itself also counts as "held".
    ///
    /// Errors: I/O errors opening the lock file (other than "not found") or from `flock`.
    pub fn is_locked(&self) -> io::Result<bool> {
        let file = match self.open_lock_file(false) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        // Dropping `file` closes it, which releases the probe's lock if it took it.
        Ok(!files::try_lock_exclusive(&file)?)
    }

    /// Reads the `started` record; `Ok(None)` if the file does not exist.
    ///
    /// Errors: I/O errors, and `InvalidData` if the file is not a valid record (never a panic).
    pub fn read_started(&self) -> io::Result<Option<StartedRecord>> {
        self.read_json(STARTED_FILE)
    }

    /// Reads the `running` record; `Ok(None)` if the file does not exist.
    ///
    /// Errors: I/O errors, and `InvalidData` if the file is not a valid record.
    pub fn read_running(&self) -> io::Result<Option<RunningRecord>> {
        self.read_json(RUNNING_FILE)
    }

    /// Reads the `exit` record; `Ok(None)` if the file does not exist.
    ///
    /// Errors: I/O errors, and `InvalidData` if the file is not a valid record.
    pub fn read_exit(&self) -> io::Result<Option<ExitRecord>> {
        self.read_json(EXIT_FILE)
    }

    /// Whether recovery gave up the claim `token` ("a shim carrying it must not start the
    /// command"). A missing file means no tombstones. A last line without its newline is a torn
    /// append from a crashed writer and is ignored (its writer never finished, so it never
    /// requeued the run).
    ///
    /// Errors: I/O errors, and `InvalidData` for a complete line that is not a token — the shim
    /// then refuses to start, failing closed.
    pub fn is_tombstoned(&self, token: u64) -> io::Result<bool> {
        let text = match fs::read_to_string(self.path.join(TOMBSTONES_FILE)) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut found = false;
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let t: u64 = line.parse().map_err(|_| {
                invalid_data(format!(
                    "{}: not a claim token: {line:?}",
                    self.path.join(TOMBSTONES_FILE).display()
                ))
            })?;
            found |= t == token;
        }
        Ok(found)
    }

    /// Records that claim `token` is dead: appends the token on its own line and fsyncs the file
    /// and the folder before returning, so the tombstone is durable before recovery requeues the
    /// run. `held` must be this run's lock: a shim checks for tombstones only after taking the
    /// lock, so writing under the lock means no shim can be between its check and its start.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_tombstone(&self, held: &RunLock, token: u64) -> io::Result<()> {
        self.check_held(held)?;
        let path = self.path.join(TOMBSTONES_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .open(&path)?;
        let mut existing = Vec::new();
        file.read_to_end(&mut existing)?;
        let mut line = String::new();
        // Terminate a torn line left by a crashed writer, so this token stays on its own line.
        if existing.last().is_some_and(|&b| b != b'\n') {
            line.push('\n');
        }
        line.push_str(&format!("{token}\n"));
        file.write_all(line.as_bytes())?;
        file.sync_all()?;
        sync_dir(&self.path)
    }

    /// Writes the `started` record atomically and durably (temporary file, fsync, rename, fsync
    /// of the folder): it must be on disk before the command is spawned, so that its absence
    /// proves the command never started.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_started(&self, held: &RunLock, record: &StartedRecord) -> io::Result<()> {
        self.check_held(held)?;
        self.write_json(STARTED_FILE, record, true)
    }

    /// Writes the `running` record atomically (rename), without fsync: losing it in a host crash
    /// loses nothing, since the command dies with the host too.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_running(&self, held: &RunLock, record: &RunningRecord) -> io::Result<()> {
        self.check_held(held)?;
        self.write_json(RUNNING_FILE, record, false)
    }

    /// Writes the `exit` record atomically and durably (temporary file, fsync, rename, fsync of
    /// the folder), before the shim releases the lock: the real status must survive the shim.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_exit(&self, held: &RunLock, record: &ExitRecord) -> io::Result<()> {
        self.check_held(held)?;
        self.write_json(EXIT_FILE, record, true)
    }

    /// Opens the run's log for appending (created with mode 0600 if missing). Append, because a
    /// run may be claimed more than once and every claim's output is kept.
    ///
    /// Errors: I/O errors (e.g. the run folder does not exist).
    pub fn open_log(&self) -> io::Result<File> {
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .open(self.log_path())
    }

    fn open_lock_file(&self, create: bool) -> io::Result<File> {
        // O_CLOEXEC (std sets it anyway; spelled out because it is load-bearing): the command
        // must not inherit the lock, or it would keep holding it after the shim died and
        // recovery would believe the shim alive.
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .mode(FILE_MODE)
            .custom_flags(libc::O_CLOEXEC)
            .open(self.path.join(LOCK_FILE))
    }

    fn lock_from(&self, file: File) -> RunLock {
        RunLock {
            file,
            dir: self.path.clone(),
        }
    }

    fn check_held(&self, held: &RunLock) -> io::Result<()> {
        if held.dir == self.path {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "writing in {} requires its lock, but the lock given is {}'s",
                    self.path.display(),
                    held.dir.display()
                ),
            ))
        }
    }

    fn read_json<T: DeserializeOwned>(&self, name: &str) -> io::Result<Option<T>> {
        let path = self.path.join(name);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| invalid_data(format!("{}: {e}", path.display())))
    }

    fn write_json<T: Serialize>(&self, name: &str, record: &T, durable: bool) -> io::Result<()> {
        let mut bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
        bytes.push(b'\n');
        let tmp = self.path.join(format!(".{name}.tmp"));
        {
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(FILE_MODE)
                .open(&tmp)?;
            file.write_all(&bytes)?;
            if durable {
                file.sync_all()?;
            }
        }
        // rename(2) replaces atomically: a reader sees the old record or the whole new one.
        fs::rename(&tmp, self.path.join(name))?;
        if durable {
            sync_dir(&self.path)?;
        }
        Ok(())
    }
}

/// The ids of the run folders present under `<state_dir>/runs/`, ascending. Entries that are not
/// folders named by an integer are skipped; a missing `runs/` means no runs.
///
/// Errors: I/O errors reading the folder.
pub fn list_run_ids(state_dir: &Path) -> io::Result<Vec<i64>> {
    let entries = match fs::read_dir(state_dir.join(RUNS_DIR)) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        if let Some(id) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Now, as RFC 3339 UTC with milliseconds (the format of every `at` field).
pub(crate) fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// fsync of a folder, which makes a rename or a new entry in it durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn invalid_data(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests;
