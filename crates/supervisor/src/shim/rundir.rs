//! The run folder, `<state_dir>/runs/<run_id>/`: its records, its lock and its tombstones,
//! shared by the shim (which writes the records) and the daemon's recovery (which reads them,
//! and writes tombstones). It must never decide a run's fate: that is `settle`'s job, from what
//! these files say.
//!
//! These files are how a run's fate is known after a daemon crash:
//!
//! | file         | written by | what                                                          |
//! | ------------ | ---------- | ------------------------------------------------------------- |
//! | `lock`       | shim       | flocked (LOCK_EX) for the shim's whole life; holds the records |
//! | `log`        | command    | its stdout and stderr, appended to by every claim             |
//! | `tombstones` | recovery   | only once recovery gave a claim up; one token per line; durable |
//!
//! The records are lines appended to `lock` (format in [`super::records`]):
//!
//! | record    | when                                                 | durable                       |
//! | --------- | ---------------------------------------------------- | ----------------------------- |
//! | `started` | before the command is spawned                        | `fdatasync` + folder `fsync`  |
//! | `running` | right after the spawn (carries the command's pid)    | no                            |
//! | `exit`    | after the command (its whole process group) is gone  | `fdatasync`                   |
//!
//! Folders written by the previous version hold each record in a file of its own (`started`,
//! `running`, `exit`, replaced by rename). Their shims may still be running after an upgrade,
//! so every reader here falls back to those files when `lock` holds no record of the kind:
//! recovery, `fleet check`, `fleet logs` and prune read both layouts. Tombstones keep their own
//! file in both, because a late shim of either version looks for them there.
//!
//! A run may be claimed more than once (requeued after a crash, same attempt), so every record
//! carries the claim's `token`: readers compare it and never mistake an earlier claim's record
//! for the current one.
//!
//! Why a lock file rather than a pid: the kernel drops an `flock` when its holder dies, so "the
//! lock is free" proves the shim is gone, and no reused pid can be mistaken for it.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::sys::files;

pub use super::records::{
    BadLine, ExitRecord, Outcome, Record, Records, RunningRecord, StartedRecord,
};

/// Name of the folder under the state directory that holds one folder per run.
pub const RUNS_DIR: &str = "runs";
/// The lock file: the shim holds an exclusive `flock` on it for its whole life, and appends its
/// records to it.
pub const LOCK_FILE: &str = "lock";
/// The previous version's file for the `started` record ([`StartedRecord`]); read, never
/// written, but by the test-only legacy layout.
pub const STARTED_FILE: &str = "started";
/// The previous version's file for the `running` record ([`RunningRecord`]); read only.
pub const RUNNING_FILE: &str = "running";
/// The previous version's file for the `exit` record ([`ExitRecord`]); read only.
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

/// The folder of one run: `<state_dir>/runs/<run_id>/`. Creating a value does no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    id: i64,
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
            id: run_id,
            path: state_dir.join(RUNS_DIR).join(run_id.to_string()),
        }
    }

    /// The run's id, for log lines about its files.
    pub fn id(&self) -> i64 {
        self.id
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

    /// The run's record file (its lock file): where the records are appended.
    pub fn records_path(&self) -> PathBuf {
        self.path.join(LOCK_FILE)
    }

    /// The newest record of each kind, from the record file, or for a kind it holds none of,
    /// from the previous version's file of that record. Nothing there is "no record". Lines of
    /// the record file that are not records are in [`Records::bad`], for the caller to report
    /// (and to fail closed on when the record it needs is missing).
    ///
    /// Errors: I/O errors, and `InvalidData` (naming the file) for a previous version's record
    /// file that is not valid (never a panic).
    pub fn records(&self) -> io::Result<Records> {
        let mut records = self.appended_records()?;
        if records.started.is_none() {
            records.started = self.read_json(STARTED_FILE)?;
        }
        if records.running.is_none() {
            records.running = self.read_json(RUNNING_FILE)?;
        }
        if records.exit.is_none() {
            records.exit = self.read_json(EXIT_FILE)?;
        }
        Ok(records)
    }

    /// Reads the newest `started` record; `Ok(None)` if there is none.
    ///
    /// Errors: as [`RunDir::records`], and `InvalidData` naming the first bad line when the
    /// record file holds no valid record of this kind but a line that is not a record (it may
    /// have been this one: "none" would be a guess).
    pub fn read_started(&self) -> io::Result<Option<StartedRecord>> {
        let records = self.appended_records()?;
        self.or_legacy(records.started, &records.bad, STARTED_FILE)
    }

    /// Reads the newest `running` record; `Ok(None)` if there is none.
    ///
    /// Errors: as [`RunDir::read_started`], for this kind of record.
    pub fn read_running(&self) -> io::Result<Option<RunningRecord>> {
        let records = self.appended_records()?;
        self.or_legacy(records.running, &records.bad, RUNNING_FILE)
    }

    /// Reads the newest `exit` record; `Ok(None)` if there is none.
    ///
    /// Errors: as [`RunDir::read_started`], for this kind of record.
    pub fn read_exit(&self) -> io::Result<Option<ExitRecord>> {
        let records = self.appended_records()?;
        self.or_legacy(records.exit, &records.bad, EXIT_FILE)
    }

    /// `found`, or failing that an error for the first of `bad`, or failing that the previous
    /// version's file `name`.
    fn or_legacy<T: DeserializeOwned>(
        &self,
        found: Option<T>,
        bad: &[BadLine],
        name: &str,
    ) -> io::Result<Option<T>> {
        match (found, bad.first()) {
            (Some(r), _) => Ok(Some(r)),
            (None, Some(line)) => Err(line.to_error()),
            (None, None) => self.read_json(name),
        }
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

    /// Appends the `started` record and makes it durable (`fdatasync` of the record file, then
    /// `fsync` of the folder, whose entry for a lock file created by this claim is not yet on
    /// disk): it must survive a crash of the machine before the command is spawned, so that
    /// its absence proves the command never started.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_started(&self, held: &RunLock, record: &StartedRecord) -> io::Result<()> {
        self.append(held, &Record::Started(record.clone()), true)?;
        sync_dir(&self.path)
    }

    /// Appends the `running` record, without any sync: losing it in a machine crash loses
    /// nothing, since the command dies with the machine too.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_running(&self, held: &RunLock, record: &RunningRecord) -> io::Result<()> {
        self.append(held, &Record::Running(record.clone()), false)
    }

    /// Appends the `exit` record and makes it durable (`fdatasync`; the file's folder entry is
    /// durable since `started`), before the shim releases the lock: the real status must
    /// survive the shim, and a crash of the machine right after the command ended.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_exit(&self, held: &RunLock, record: &ExitRecord) -> io::Result<()> {
        self.append(held, &Record::Exit(record.clone()), true)
    }

    /// Appends the first half of `record`'s line and nothing more, as a writer that dies
    /// mid-write leaves it: for the failpoints that crash there. Test builds only.
    ///
    /// Errors: as [`RunDir::write_exit`].
    #[cfg(feature = "failpoints")]
    pub fn write_torn(&self, held: &RunLock, record: &Record) -> io::Result<()> {
        self.check_held(held)?;
        let line = super::records::encode(record)?;
        let end = clean_end(&held.file)?;
        held.file.write_all_at(&line[..line.len() / 2], end)
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

    /// The records appended to the record file (none if it does not exist).
    fn appended_records(&self) -> io::Result<Records> {
        let path = self.records_path();
        match fs::read(&path) {
            Ok(bytes) => Ok(super::records::decode(&bytes, &path)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Records::default()),
            Err(e) => Err(e),
        }
    }

    /// Appends `record`'s line to the record file through the held lock's descriptor, after
    /// cutting off a torn line a dead writer left (see [`super::records`]); `durable`: then
    /// `fdatasync`s it (which covers the file's new size, so an append is durable without the
    /// `fsync` of its timestamps).
    fn append(&self, held: &RunLock, record: &Record, durable: bool) -> io::Result<()> {
        self.check_held(held)?;
        let line = super::records::encode(record)?;
        let end = clean_end(&held.file)?;
        // One positioned write of the whole line: a reader sees it whole or sees it torn (and
        // skips it), never two records run together. Only the lock's holder writes here.
        held.file.write_all_at(&line, end)?;
        if durable {
            held.file.sync_data()?;
        }
        Ok(())
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

/// The length of `file` once a torn last line (no `\n`) is cut off: where the next record
/// goes. Costs an `fstat` and a one-byte read when the file ends whole, as it does but after a
/// crash mid-write.
fn clean_end(file: &File) -> io::Result<u64> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(0);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] == b'\n' {
        return Ok(len);
    }
    let mut all = vec![0u8; len as usize];
    file.read_exact_at(&mut all, 0)?;
    let keep = super::records::complete_len(&all) as u64;
    file.set_len(keep)?;
    Ok(keep)
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
