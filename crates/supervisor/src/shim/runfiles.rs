//! A run's files under `<state_dir>/runs/`: its lock and records, its tombstones and its log,
//! shared by the shim (which writes the records) and the daemon's recovery (which reads them,
//! and writes tombstones). It must never decide a run's fate: that is `settle`'s job, from what
//! these files say.
//!
//! These files are how a run's fate is known after a daemon crash. They sit flat in `runs/`,
//! named by the run's id, without a folder per run (a folder is one more inode to allocate per
//! run, which is what a start costs most on the disk):
//!
//! | file                   | written by         | what                                                     |
//! | ---------------------- | ------------------ | -------------------------------------------------------- |
//! | `<id>.lock`            | shim, recovery     | flocked (LOCK_EX) by the shim for its whole life; holds the records and the tombstones |
//! | `<id>.log`             | command, via shim  | its stdout and stderr, appended to by every claim; made at the first output |
//! | `<id>.log.compacting`  | shim               | a log compaction's side file ([`super::logbound`])       |
//!
//! The records are lines appended to `<id>.lock` (format in [`super::records`]):
//!
//! | record      | when                                                 | durable                        |
//! | ----------- | ---------------------------------------------------- | ------------------------------ |
//! | `started`   | before the command is spawned                        | `fdatasync` + `fsync` of `runs/` |
//! | `running`   | right after the spawn (carries the command's pid)    | no                             |
//! | `exit`      | after the command (its whole process group) is gone  | `fdatasync`                    |
//! | `tombstone` | by recovery, once it gave a claim up                 | `fdatasync` + `fsync` of `runs/` |
//!
//! A run whose command never writes a byte has no log file at all: readers take a missing log
//! for an empty one.
//!
//! # Earlier layouts
//!
//! Earlier versions kept a folder per run, `runs/<id>/`, holding `lock`, `log` and `tombstones`,
//! with the records appended to `lock` (the version just before this one) or each in a file of
//! its own, `started`, `running` and `exit`, replaced by rename (the one before). Their shims
//! may still be running after an upgrade, so every reader here reads all three: records come
//! from `<id>.lock` first, then for a kind it holds none of from the folder's `lock`, then from
//! the folder's own file of that record; a run's lock is held when either lock file is; a
//! claim is tombstoned when either place says so. The log is the folder's when the folder has
//! one.
//!
//! A shim of an earlier version that is late (forked before the upgrade, not yet at its lock)
//! looks for its tombstone in the folder only, and creates the folder itself. So a claim given
//! up by recovery is tombstoned in both places, under both locks ([`RunFiles::lock_folder_too`]):
//! this is the one write of this version into a folder, and only on that rare path.
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
    BadLine, ExitRecord, Outcome, Record, Records, RunningRecord, StartedRecord, TombstoneRecord,
};

/// Name of the folder under the state directory that holds every run's files.
pub const RUNS_DIR: &str = "runs";
/// Suffix of a run's lock file, `runs/<id>.lock`: the shim holds an exclusive `flock` on it for
/// its whole life, and the records and tombstones are appended to it.
pub const LOCK_SUFFIX: &str = ".lock";
/// Suffix of a run's log, `runs/<id>.log`.
pub const LOG_SUFFIX: &str = ".log";
/// Suffix of a log compaction's side file, after the log's own name.
pub const COMPACTING_SUFFIX: &str = ".compacting";
/// Earlier layouts: the lock file in the run's folder (the records appended to it in the
/// version just before this one). Read, and written only to tombstone a claim.
pub const LOCK_FILE: &str = "lock";
/// Earlier layouts: the file of the `started` record ([`StartedRecord`]); read, never written,
/// but by the test-only earlier-layout writer.
pub const STARTED_FILE: &str = "started";
/// Earlier layouts: the file of the `running` record ([`RunningRecord`]); read only.
pub const RUNNING_FILE: &str = "running";
/// Earlier layouts: the file of the `exit` record ([`ExitRecord`]); read only.
pub const EXIT_FILE: &str = "exit";
/// Earlier layouts: the tombstones, one claim token per line; read, and written with every
/// tombstone (see the module documentation).
pub const TOMBSTONES_FILE: &str = "tombstones";
/// Earlier layouts: the command's combined stdout and stderr.
pub const LOG_FILE: &str = "log";

/// Mode of `runs/` (and of a folder of an earlier layout): the state directory is private (run
/// logs and records are the operator's business alone).
const DIR_MODE: u32 = 0o700;
/// Mode of every file of a run.
pub(super) const FILE_MODE: u32 = 0o600;

/// Where a shim writes. Readers read every layout whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// This version's: `runs/<id>.lock`, `runs/<id>.log`.
    Flat,
    /// An earlier version's folder, `runs/<id>/`: written only by the test-only earlier-layout
    /// writer ([`super::legacy`]), so that a test can leave runs exactly as an earlier shim.
    #[cfg(feature = "failpoints")]
    Folder,
}

/// The files of one run under `<state_dir>/runs/`. Creating a value does no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFiles {
    id: i64,
    runs: PathBuf,
    layout: Layout,
}

/// An exclusive `flock` on a run's lock file, released when dropped (or when the holding process
/// dies: the kernel drops it, which is why a free lock proves the shim is gone). Recovery also
/// holds the earlier layout's lock while it tombstones a claim.
///
/// Methods that write a run's files take a `&RunLock` to prove the caller holds that run's lock.
#[derive(Debug)]
pub struct RunLock {
    /// The lock file the records are appended to (`<id>.lock`, or the folder's `lock` for the
    /// test-only earlier-layout writer).
    file: File,
    /// The earlier layout's lock, when held too.
    folder: Option<File>,
    /// Whose lock this is: the run's lock file path.
    path: PathBuf,
}

impl RunLock {
    /// The lock file this lock holds (the one records are appended to).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the earlier layout's folder lock is held as well (see
    /// [`RunFiles::lock_folder_too`]).
    pub fn covers_folder(&self) -> bool {
        self.folder.is_some()
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Closing the files would release the locks anyway; unlocking explicitly first keeps
        // the release at this exact point even if a descriptor were ever shared.
        let _ = files::unlock(&self.file);
        if let Some(f) = &self.folder {
            let _ = files::unlock(f);
        }
    }
}

impl RunFiles {
    /// The files of run `run_id` under `state_dir` (`<state_dir>/runs/<run_id>.*`). No I/O.
    pub fn new(state_dir: &Path, run_id: i64) -> RunFiles {
        RunFiles {
            id: run_id,
            runs: state_dir.join(RUNS_DIR),
            layout: Layout::Flat,
        }
    }

    /// The same run, written in `layout` (test builds' earlier-layout writer only).
    #[cfg(feature = "failpoints")]
    pub(crate) fn with_layout(mut self, layout: Layout) -> RunFiles {
        self.layout = layout;
        self
    }

    /// The run's id, for log lines about its files.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The run's lock file, `runs/<id>.lock`, where its records and tombstones are appended:
    /// the path to name in messages about the run's files.
    pub fn lock_path(&self) -> PathBuf {
        self.runs.join(format!("{}{LOCK_SUFFIX}", self.id))
    }

    /// The run's files for a message: `<state_dir>/runs/<id>.*` when any of its flat files
    /// exists, and the earlier layout's folder when it exists (the flat pattern when neither
    /// does).
    pub fn describe(&self) -> String {
        let flat = self
            .runs
            .join(format!("{}.*", self.id))
            .display()
            .to_string();
        let folder = self.folder();
        let has_flat = [self.lock_path(), self.flat_log_path()]
            .iter()
            .any(|p| p.exists());
        match (has_flat, folder.is_dir()) {
            (true, true) => format!("{flat} and {}/", folder.display()),
            (false, true) => format!("{}/", folder.display()),
            _ => flat,
        }
    }

    /// The folder of the earlier layouts, `runs/<id>/` (it may not exist).
    pub fn folder(&self) -> PathBuf {
        self.runs.join(self.id.to_string())
    }

    /// Path of the run's log (the command's stdout and stderr, every claim appended): the
    /// earlier layout's `runs/<id>/log` when it exists, else `runs/<id>.log`, which exists
    /// only once the command wrote something. Costs a `stat`.
    pub fn log_path(&self) -> PathBuf {
        let folder_log = self.folder().join(LOG_FILE);
        if self.writes_folder() || folder_log.exists() {
            return folder_log;
        }
        self.runs.join(format!("{}{LOG_SUFFIX}", self.id))
    }

    /// The side file a compaction of the log at `log` writes before renaming it over the log.
    pub fn compacting_path(log: &Path) -> PathBuf {
        let mut name = log.as_os_str().to_os_string();
        name.push(COMPACTING_SUFFIX);
        PathBuf::from(name)
    }

    /// `mkdir -p` of `runs/`; every folder it creates gets mode 0700 (the state directory is
    /// private). Existing folders are left as they are.
    ///
    /// Errors: any I/O error from creating them.
    pub fn create_runs_dir(&self) -> io::Result<()> {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.runs)
    }

    /// Takes the run's lock without waiting: `Ok(None)` if another open file description
    /// (another process, normally the shim) holds it — this version's lock file or, when the
    /// run has an earlier layout's folder, the folder's. Creates `runs/<id>.lock` if missing,
    /// so that recovery can lock and tombstone a claim whose shim has not even created it yet.
    ///
    /// Errors: I/O errors creating or opening the lock files, or from `flock`.
    pub fn try_lock(&self) -> io::Result<Option<RunLock>> {
        let file = self.open_lock(true)?;
        if !files::try_lock_exclusive(&file)? {
            return Ok(None);
        }
        let mut lock = RunLock {
            file,
            folder: None,
            path: self.own_lock_path(),
        };
        match self.open_folder_lock(false) {
            Ok(f) if files::try_lock_exclusive(&f)? => lock.folder = Some(f),
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Some(lock))
    }

    /// `lock`, with the earlier layout's folder lock held too, creating the folder and its lock
    /// file if missing: `Ok(None)` if another holder has the folder's lock (a shim of an earlier
    /// version got there first; `lock` is released). Needed before a tombstone: a late shim of
    /// an earlier version locks and looks in the folder only. The caller reads the records
    /// again under the returned lock, since such a shim may have written some in between.
    ///
    /// Errors: I/O errors creating or locking the folder's lock file.
    pub fn lock_folder_too(&self, mut lock: RunLock) -> io::Result<Option<RunLock>> {
        if lock.folder.is_some() {
            return Ok(Some(lock));
        }
        let folder = self.folder();
        match DirBuilder::new().mode(DIR_MODE).create(&folder) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(naming(&folder, e)),
            _ => {}
        }
        let f = self
            .open_folder_lock(true)
            .map_err(|e| naming(&folder.join(LOCK_FILE), e))?;
        if !files::try_lock_exclusive(&f)? {
            return Ok(None);
        }
        lock.folder = Some(f);
        Ok(Some(lock))
    }

    /// Takes the run's lock for its shim, waiting as long as another holder keeps it; creates
    /// `runs/` and the lock file if missing. The shim calls this before anything else it does
    /// with the run's files, and checks the tombstones right after: a shim that was late to
    /// lock may find its claim given up by recovery, and must then not start the command.
    ///
    /// Errors: I/O errors creating or opening the lock file, or from `flock`.
    pub fn lock_blocking(&self) -> io::Result<RunLock> {
        let file = self.open_lock(true)?;
        files::lock_exclusive(&file)?;
        Ok(RunLock {
            file,
            folder: None,
            path: self.own_lock_path(),
        })
    }

    /// Whether the run's lock is held by another open file description — in practice, whether
    /// the run's shim is alive: this version's lock file or the earlier layout's. Probes with a
    /// non-blocking `flock` and releases at once; creates nothing (a missing lock file means
    /// nobody holds it). Note: a [`RunLock`] held by the calling process itself also counts as
    /// "held".
    ///
    /// Errors: I/O errors opening a lock file (other than "not found") or from `flock`.
    pub fn is_locked(&self) -> io::Result<bool> {
        for file in [self.open_lock(false), self.open_folder_lock(false)] {
            let file = match file {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            // Dropping `file` closes it, which releases the probe's lock if it took it.
            if !files::try_lock_exclusive(&file)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Waits until no one holds the run's lock — this version's lock file and the earlier
    /// layout's, each if it exists (nothing is created) — taking and releasing each in turn.
    /// For a daemon that adopted a run and waits for its shim to end.
    ///
    /// Errors: I/O errors opening a lock file (other than "not found") or from `flock`.
    pub fn wait_released(&self) -> io::Result<()> {
        for file in [self.open_lock(false), self.open_folder_lock(false)] {
            match file {
                Ok(f) => files::lock_exclusive(&f)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether any file of the run exists (its lock file, its folder of an earlier layout or
    /// its log).
    ///
    /// Errors: I/O errors other than "not found" from `stat`.
    pub fn exists(&self) -> io::Result<bool> {
        for p in [self.lock_path(), self.folder(), self.flat_log_path()] {
            match fs::symlink_metadata(&p) {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// The newest record of each kind — from `runs/<id>.lock`, or for a kind it holds none of,
    /// from the earlier layout's folder (its `lock`, then the record's own file) — and every
    /// tombstone of the lock file. Nothing there is "no record". Lines of the lock files that
    /// are not records are in [`Records::bad`], for the caller to report (and to fail closed on
    /// when the record it needs is missing).
    ///
    /// Errors: I/O errors, and `InvalidData` (naming the file) for an earlier version's record
    /// file that is not valid (never a panic).
    pub fn records(&self) -> io::Result<Records> {
        let records = self.appended(&self.lock_path())?;
        Ok(self.with_folder(records)?.0)
    }

    /// What a shim that has just taken `held`, this run's lock, must know before it starts its
    /// claim `token`: whether recovery gave that claim up (as [`RunFiles::is_tombstoned`], and
    /// with its errors), and the newest `started` record (as [`RunFiles::read_started`], its
    /// error kept apart: an unreadable earlier record does not stop the claim). One read of the
    /// lock file, through `held`'s own descriptor, and one look for the earlier layout's
    /// folder — on the path of every start, where reopening the file for each question cost
    /// two opens and the folder's absence was looked up three times.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; as [`RunFiles::is_tombstoned`].
    pub fn before_start(
        &self,
        held: &RunLock,
        token: u64,
    ) -> io::Result<(bool, io::Result<Option<StartedRecord>>)> {
        self.check_held(held)?;
        if self.writes_folder() {
            return Ok((self.is_tombstoned(token)?, self.read_started()));
        }
        let own = super::records::decode(&read_all(&held.file)?, &held.path);
        let (records, folder) = self.with_folder(own)?;
        let tombstoned = if records.tombstones.contains(&token) {
            true
        } else if let Some(bad) = records.bad.first() {
            return Err(bad.to_error());
        } else {
            folder && self.folder_tombstoned(token)?
        };
        Ok((tombstoned, or_bad(records.started, &records.bad)))
    }

    /// `records` (those of `runs/<id>.lock`) completed from the earlier layout's folder as
    /// [`RunFiles::records`] describes, and whether that folder exists.
    fn with_folder(&self, mut records: Records) -> io::Result<(Records, bool)> {
        // One `stat` instead of four failed opens for a run of this version, on the shim's
        // start and every reap.
        match fs::symlink_metadata(self.folder()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((records, false)),
            _ => {}
        }
        let folder = self.appended(&self.folder().join(LOCK_FILE))?;
        records.bad.extend(folder.bad);
        records.tombstones.extend(folder.tombstones);
        if records.started.is_none() {
            records.started = match folder.started {
                Some(r) => Some(r),
                None => self.read_json(STARTED_FILE)?,
            };
        }
        if records.running.is_none() {
            records.running = match folder.running {
                Some(r) => Some(r),
                None => self.read_json(RUNNING_FILE)?,
            };
        }
        if records.exit.is_none() {
            records.exit = match folder.exit {
                Some(r) => Some(r),
                None => self.read_json(EXIT_FILE)?,
            };
        }
        Ok((records, true))
    }

    /// Reads the newest `started` record; `Ok(None)` if there is none.
    ///
    /// Errors: as [`RunFiles::records`], and `InvalidData` naming the first bad line when no
    /// valid record of this kind is found but a line that is not a record is (it may have been
    /// this one: "none" would be a guess).
    pub fn read_started(&self) -> io::Result<Option<StartedRecord>> {
        let r = self.records()?;
        or_bad(r.started, &r.bad)
    }

    /// Reads the newest `running` record; `Ok(None)` if there is none.
    ///
    /// Errors: as [`RunFiles::read_started`], for this kind of record.
    pub fn read_running(&self) -> io::Result<Option<RunningRecord>> {
        let r = self.records()?;
        or_bad(r.running, &r.bad)
    }

    /// Reads the newest `exit` record; `Ok(None)` if there is none.
    ///
    /// Errors: as [`RunFiles::read_started`], for this kind of record.
    pub fn read_exit(&self) -> io::Result<Option<ExitRecord>> {
        let r = self.records()?;
        or_bad(r.exit, &r.bad)
    }

    /// Whether recovery gave up the claim `token` ("a shim carrying it must not start the
    /// command"): a tombstone record in the lock file, or the token in the earlier layout's
    /// `tombstones` file. Missing files mean no tombstones. A last line without its newline is
    /// a torn append from a crashed writer and is ignored (its writer never finished, so it
    /// never requeued the run).
    ///
    /// Errors: I/O errors, and `InvalidData` for a complete line that is not a record or a
    /// token when no tombstone of `token` is found (it may have been that one) — the shim then
    /// refuses to start, failing closed.
    pub fn is_tombstoned(&self, token: u64) -> io::Result<bool> {
        if self.writes_folder() {
            // The test-only earlier-layout writer looks where those shims looked: the folder.
            return self.folder_tombstoned(token);
        }
        let records = self.records()?;
        if records.tombstones.contains(&token) {
            return Ok(true);
        }
        if let Some(bad) = records.bad.first() {
            return Err(bad.to_error());
        }
        self.folder_tombstoned(token)
    }

    /// Whether the earlier layout's `tombstones` file holds `token` (see
    /// [`RunFiles::is_tombstoned`]).
    fn folder_tombstoned(&self, token: u64) -> io::Result<bool> {
        let path = self.folder().join(TOMBSTONES_FILE);
        let text = match fs::read_to_string(&path) {
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
                invalid_data(format!("{}: not a claim token: {line:?}", path.display()))
            })?;
            found |= t == token;
        }
        Ok(found)
    }

    /// Records that claim `token` is dead, durably before it returns, so that recovery may
    /// requeue the run: a tombstone record appended to the lock file (`fdatasync`, and `fsync`
    /// of `runs/`, for a lock file recovery itself created), and the token appended to the
    /// earlier layout's `tombstones` (fsynced with its folder), where a late shim of an earlier
    /// version looks. `held` must be this run's lock and cover the folder too
    /// ([`RunFiles::lock_folder_too`]): a shim checks for tombstones only after taking its
    /// lock, so writing under both locks means no shim can be between its check and its start.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock or does not cover the folder;
    /// I/O errors.
    pub fn write_tombstone(&self, held: &RunLock, token: u64) -> io::Result<()> {
        self.check_held(held)?;
        if held.folder.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tombstoning claim {token} of run {} needs the folder's lock too",
                    self.id
                ),
            ));
        }
        let record = Record::Tombstone(TombstoneRecord {
            token,
            at: now_rfc3339(),
        });
        self.append(held, &record, true)?;
        self.sync_parent()?;
        let folder = self.folder();
        let path = folder.join(TOMBSTONES_FILE);
        append_token(&path, token)
            .and_then(|()| sync_dir(&folder))
            .map_err(|e| naming(&path, e))
    }

    /// Appends the `started` record and makes it durable (`fdatasync` of the lock file, then
    /// `fsync` of its folder, whose entry for a lock file created by this claim is not yet on
    /// disk): it must survive a crash of the machine before the command is spawned, so that
    /// its absence proves the command never started.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_started(&self, held: &RunLock, record: &StartedRecord) -> io::Result<()> {
        self.append(held, &Record::Started(record.clone()), true)?;
        self.sync_parent()
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
    /// Errors: as [`RunFiles::write_exit`].
    #[cfg(feature = "failpoints")]
    pub fn write_torn(&self, held: &RunLock, record: &Record) -> io::Result<()> {
        self.check_held(held)?;
        let line = super::records::encode(record)?;
        let end = clean_end(&held.file)?;
        held.file.write_all_at(&line[..line.len() / 2], end)
    }

    /// Opens the run's log ([`RunFiles::log_path`]) for appending, creating it with mode 0600 if
    /// missing; a symbolic link in its place is an error (`ELOOP`), never followed. Append,
    /// because a run may be claimed more than once and every claim's output is kept.
    ///
    /// Errors: I/O errors (e.g. `runs/` does not exist).
    pub fn open_log(&self) -> io::Result<File> {
        open_appending(&self.log_path(), false)
    }

    /// Removes every file of the run — its log and a compaction's side file, the earlier
    /// layout's folder, then the lock file — while holding its lock (`held`), so that no shim
    /// of the run can start in between. `Ok(false)` when something appeared in the folder while
    /// it went, every time of `tries`: the rest is left for later. For prune, which removes
    /// only runs that ended. Files already gone are fine.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn remove(&self, held: RunLock, tries: usize) -> io::Result<bool> {
        self.check_held(&held)?;
        let log = self.flat_log_path();
        for p in [Self::compacting_path(&log), log] {
            remove_file(&p)?;
        }
        let mut folder_gone = false;
        for _ in 0..tries.max(1) {
            match fs::remove_dir_all(self.folder()) {
                Ok(()) => folder_gone = true,
                // Gone, in whole or in part, under us: what is gone is fine.
                Err(e) if e.kind() == io::ErrorKind::NotFound => folder_gone = true,
                // Something appeared inside while it went: try again, then leave it for later.
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => continue,
                Err(e) => return Err(e),
            }
            break;
        }
        if !folder_gone {
            return Ok(false);
        }
        // Last, still held: a crash before this leaves the lock file, and so the run, for the
        // next prune to finish.
        remove_file(&self.lock_path())?;
        drop(held);
        Ok(true)
    }

    /// `runs/<id>.log`, whether or not it exists.
    fn flat_log_path(&self) -> PathBuf {
        self.runs.join(format!("{}{LOG_SUFFIX}", self.id))
    }

    /// Whether this value's writes go to the earlier layout's folder (test-only writer).
    fn writes_folder(&self) -> bool {
        #[cfg(feature = "failpoints")]
        if self.layout == Layout::Folder {
            return true;
        }
        false
    }

    /// The lock file this value's writer holds and appends to.
    fn own_lock_path(&self) -> PathBuf {
        if self.writes_folder() {
            self.folder().join(LOCK_FILE)
        } else {
            self.lock_path()
        }
    }

    /// The records appended to the lock file at `path` (none if it does not exist).
    fn appended(&self, path: &Path) -> io::Result<Records> {
        match fs::read(path) {
            Ok(bytes) => Ok(super::records::decode(&bytes, path)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Records::default()),
            Err(e) => Err(e),
        }
    }

    /// Appends `record`'s line to the held lock file, after cutting off a torn line a dead
    /// writer left (see [`super::records`]); `durable`: then `fdatasync`s it (which covers the
    /// file's new size, so an append is durable without the `fsync` of its timestamps).
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

    /// `fsync` of the folder holding the lock file this value writes: it makes the lock file's
    /// entry durable.
    fn sync_parent(&self) -> io::Result<()> {
        if self.writes_folder() {
            sync_dir(&self.folder())
        } else {
            sync_dir(&self.runs)
        }
    }

    /// Opens this value's lock file (`create`: making `runs/`, or the folder for the test-only
    /// writer, when missing).
    fn open_lock(&self, create: bool) -> io::Result<File> {
        let path = self.own_lock_path();
        match open_lock_file(&path, create) {
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                if self.writes_folder() {
                    DirBuilder::new()
                        .recursive(true)
                        .mode(DIR_MODE)
                        .create(self.folder())?;
                } else {
                    self.create_runs_dir()?;
                }
                open_lock_file(&path, create)
            }
            other => other,
        }
    }

    /// Opens the earlier layout's folder lock (`create`: when missing; the folder must exist).
    /// The test-only folder writer's own lock is that file, so it is never probed twice.
    fn open_folder_lock(&self, create: bool) -> io::Result<File> {
        if self.writes_folder() {
            return Err(io::ErrorKind::NotFound.into());
        }
        open_lock_file(&self.folder().join(LOCK_FILE), create)
    }

    fn check_held(&self, held: &RunLock) -> io::Result<()> {
        if held.path == self.own_lock_path() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "writing run {}'s files requires its lock, but the lock given is {}",
                    self.id,
                    held.path.display()
                ),
            ))
        }
    }

    /// An earlier layout's record file `name` in the run's folder.
    fn read_json<T: DeserializeOwned>(&self, name: &str) -> io::Result<Option<T>> {
        let path = self.folder().join(name);
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

/// The whole of `file`, read from its start with positioned reads (its offset is left alone).
fn read_all(file: &File) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match file.read_at(&mut chunk, bytes.len() as u64) {
            Ok(0) => return Ok(bytes),
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// `found`, or failing that an error for the first of `bad`, or failing that none.
fn or_bad<T>(found: Option<T>, bad: &[BadLine]) -> io::Result<Option<T>> {
    match (found, bad.first()) {
        (Some(r), _) => Ok(Some(r)),
        (None, Some(line)) => Err(line.to_error()),
        (None, None) => Ok(None),
    }
}

/// Opens a lock file read-write, mode 0600 when created.
fn open_lock_file(path: &Path, create: bool) -> io::Result<File> {
    // O_CLOEXEC (std sets it anyway; spelled out because it is load-bearing): the command must
    // not inherit the lock, or it would keep holding it after the shim died and recovery would
    // believe the shim alive. O_NOFOLLOW: a link planted in its place is an error, never a
    // file elsewhere that the records would be appended to.
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .mode(FILE_MODE)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}

/// The ids of the runs that have files under `<state_dir>/runs/` (`<id>.lock`, `<id>.log`, or a
/// folder `<id>/` of an earlier layout), ascending, each once. Other entries are skipped; a
/// missing `runs/` means no runs.
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
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let id = if let Some(stem) = name
            .strip_suffix(LOCK_SUFFIX)
            .or_else(|| name.strip_suffix(LOG_SUFFIX))
        {
            run_id(stem)
        } else if entry.file_type()?.is_dir() {
            run_id(name)
        } else {
            None
        };
        ids.extend(id);
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The run id a name in `runs/` stands for: a positive integer written as fleet writes it
/// (no sign, no leading zero), else `None` — `-5`, `+7` or `007` are someone else's files.
fn run_id(name: &str) -> Option<i64> {
    let id: i64 = name.parse().ok()?;
    (id > 0 && id.to_string() == name).then_some(id)
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

/// Opens `path` for appending (and reading too, with `read`), creating it with mode 0600 if
/// missing: the way every appended-to file of a run is opened. A symbolic link in its place is
/// an error (`ELOOP`), never followed, so that a link planted there cannot send a run's output
/// or records elsewhere.
///
/// Errors: I/O errors (e.g. the folder does not exist).
pub(super) fn open_appending(path: &Path, read: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(read)
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Appends `token` on its own line to the earlier layout's tombstones file `path`, synced.
fn append_token(path: &Path, token: u64) -> io::Result<()> {
    let mut file = open_appending(path, true)?;
    let mut existing = Vec::new();
    file.read_to_end(&mut existing)?;
    let mut line = String::new();
    // Terminate a torn line left by a crashed writer, so this token stays on its own line.
    if existing.last().is_some_and(|&b| b != b'\n') {
        line.push('\n');
    }
    line.push_str(&format!("{token}\n"));
    file.write_all(line.as_bytes())?;
    file.sync_all()
}

/// `e`, its message prefixed with `path`: for an error of a step whose file the caller's own
/// message does not name.
fn naming(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// `unlink`, a missing file being fine.
fn remove_file(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
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
