//! A run's files under `<state_dir>/runs/`: its lock and records, its tombstones and its log,
//! shared by the shim (which writes the records) and the daemon's recovery (which reads them,
//! and writes tombstones). It must never decide a run's fate: that is `settle`'s job, from what
//! these files say.
//!
//! These files are how a run's fate is known after a daemon crash. A run's lock and records
//! live in its *record slot*, 4 KiB of a segment file shared by 1,024 runs
//! ([`super::segment`]), so that starting a run creates no file (a new inode is what a start
//! cost most on the disk):
//!
//! | file                       | written by         | what                                                |
//! | -------------------------- | ------------------ | --------------------------------------------------- |
//! | `records-<first id>`       | shims, recovery    | the run's record slot: locked (an OFD lock on its bytes) by the shim for its whole life; holds the records and the tombstones |
//! | `<id>.more`                | shim, recovery     | the records that no longer fit in the slot, appended (rare: a run claimed many times) |
//! | `<id>.log`                 | command, via shim  | its stdout and stderr, appended to by every claim; made at the first output |
//! | `<id>.log.compacting`      | shim               | a log compaction's side file ([`super::logbound`])  |
//!
//! The records are lines (format in [`super::records`]):
//!
//! | record      | when                                                 | durable                        |
//! | ----------- | ---------------------------------------------------- | ------------------------------ |
//! | `started`   | before the command is spawned                        | no (see [`crate::boot`])       |
//! | `running`   | right after the spawn (carries the command's pid)    | no                             |
//! | `exit`      | after the command (its whole process group) is gone  | `fdatasync` of the segment     |
//! | `tombstone` | by recovery, once it gave a claim up                 | `fdatasync` of the segment     |
//!
//! A segment's entry in `runs/` is made durable once, by its first opener, before anything in
//! it counts ([`super::segment::HEADER`]); so is a `<id>.more` by the writer that makes it.
//!
//! A run whose command never writes a byte has no log file at all: readers take a missing log
//! for an empty one.
//!
//! # Earlier layouts
//!
//! The version just before this one kept a lock file per run, `runs/<id>.lock`, flocked by the
//! shim for its whole life, with the records appended to it. Earlier ones kept a folder per
//! run, `runs/<id>/`, holding `lock`, `log` and `tombstones`, with the records appended to
//! `lock` or (the first) each in a file of its own, `started`, `running` and `exit`, replaced by
//! rename. Their shims may still be running after an upgrade, so every reader here reads all of
//! them, newest layout first: for each kind of record, the newest found in `<id>.more`, then
//! the slot, then `<id>.lock`, then the folder's `lock`, then the folder's own file of that
//! record. A run's lock is held when its slot's lock or either lock file is; a claim is
//! tombstoned when any place says so.
//!
//! A shim of an earlier version that is late (forked before the upgrade, not yet at its lock)
//! looks for its tombstone in its own layout only. So a claim given up by recovery is
//! tombstoned in every place, under every lock ([`RunFiles::lock_earlier_too`]): these are the
//! only writes of this version into an earlier layout, and only on that rare path.
//!
//! A run may be claimed more than once (requeued after a crash, same attempt), so every record
//! carries the claim's `token`: readers compare it and never mistake an earlier claim's record
//! for the current one.
//!
//! Why a lock rather than a pid: the kernel drops an OFD lock (or an `flock`) when its holder
//! dies, so "the lock is free" proves the shim is gone, and no reused pid can be mistaken for
//! it.

use std::cell::Cell;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::segment::{self, open_lock_file, RecordSlot};
use crate::sys::files;

pub use super::runs_dir::{highest_run_ids, list_run_ids, live_run_candidates};

pub use super::records::{
    BadLine, ExitRecord, Outcome, Record, Records, RunningRecord, StartedRecord, TombstoneRecord,
};

/// Name of the folder under the state directory that holds every run's files.
pub const RUNS_DIR: &str = "runs";
/// Suffix of a run's overflow file, `runs/<id>.more`: the records that no longer fit in its
/// slot, appended.
pub const MORE_SUFFIX: &str = ".more";
/// Suffix of a run's log, `runs/<id>.log`.
pub const LOG_SUFFIX: &str = ".log";
/// Suffix of a log compaction's side file, after the log's own name.
pub const COMPACTING_SUFFIX: &str = ".compacting";
/// The version just before this one: suffix of a run's own lock file, `runs/<id>.lock`, flocked
/// by its shim, with the records appended. Read, and written only to tombstone a claim.
pub const LOCK_SUFFIX: &str = ".lock";
/// Earlier layouts: the lock file in the run's folder (the records appended to it in the
/// version that had the folder last). Read, and written only to tombstone a claim.
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
    /// This version's: the run's slot in `runs/records-<first id>`, `runs/<id>.more`,
    /// `runs/<id>.log`.
    Slots,
    /// The version just before's lock file per run, `runs/<id>.lock`: written only by the
    /// test-only earlier-layout writer ([`super::legacy`]).
    #[cfg(feature = "failpoints")]
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

/// A run's lock, released when dropped (or when the holding process dies: the kernel drops it,
/// which is why a free lock proves the shim is gone): the OFD lock on the run's slot, and, when
/// recovery tombstones a claim, the earlier layouts' lock files too.
///
/// Methods that write a run's files take a `&RunLock` to prove the caller holds that run's lock.
#[derive(Debug)]
pub struct RunLock {
    /// Whose lock this is.
    id: i64,
    /// The file the holder writes records into: the run's segment, or the lock file of the
    /// test-only earlier-layout writers.
    file: File,
    /// The slot locked through `file`; `None` when `file` itself is flocked (the test-only
    /// writers of earlier layouts).
    slot: Option<RecordSlot>,
    /// `runs/<id>.lock` of the version just before, flocked, when held too.
    flat: Option<File>,
    /// The earlier layout's folder lock, when held too.
    folder: Option<File>,
    /// `file`'s path.
    path: PathBuf,
    /// Whether this run's records go to `<id>.more` (once one did, all later ones must, so
    /// that reading the slot, then the overflow, keeps their order); `None` until looked at.
    more: Cell<Option<bool>>,
}

impl RunLock {
    /// The file this lock's records go to: the run's segment (shared with other runs), or an
    /// earlier layout's lock file for the test-only writers.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether every earlier layout's lock is held as well (see [`RunFiles::lock_earlier_too`]).
    pub fn covers_earlier(&self) -> bool {
        self.folder.is_some() && (self.flat.is_some() || self.slot.is_none())
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Closing the files would release the locks anyway; unlocking explicitly first keeps
        // the release at this exact point even if a descriptor were ever shared.
        match &self.slot {
            Some(slot) => {
                let _ = slot.unlock(&self.file);
            }
            None => {
                let _ = files::unlock(&self.file);
            }
        }
        for f in [&self.flat, &self.folder].into_iter().flatten() {
            let _ = files::unlock(f);
        }
    }
}

impl RunFiles {
    /// The files of run `run_id` under `state_dir` (its slot in `<state_dir>/runs/records-…`,
    /// and `<state_dir>/runs/<run_id>.*`). No I/O.
    pub fn new(state_dir: &Path, run_id: i64) -> RunFiles {
        RunFiles {
            id: run_id,
            runs: state_dir.join(RUNS_DIR),
            layout: Layout::Slots,
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

    /// The run's slot: its segment file and its bytes there.
    pub fn record_slot(&self) -> RecordSlot {
        RecordSlot::of(&self.runs, self.id)
    }

    /// The file that holds the run's lock and records: its segment, `runs/records-<first id>`
    /// (shared with 1,023 other runs). The path to name in messages about the run's records.
    pub fn lock_path(&self) -> PathBuf {
        self.record_slot().segment().to_path_buf()
    }

    /// The version just before's lock file, `runs/<id>.lock` (it may not exist).
    pub fn flat_lock_path(&self) -> PathBuf {
        self.runs.join(format!("{}{LOCK_SUFFIX}", self.id))
    }

    /// The run's overflow file, `runs/<id>.more` (it exists only for a run whose records
    /// outgrew its slot).
    pub fn more_path(&self) -> PathBuf {
        self.runs.join(format!("{}{MORE_SUFFIX}", self.id))
    }

    /// The run's files for a message: its record slot (`record slot of run <id> in <segment>`) when it holds
    /// anything, `<state_dir>/runs/<id>.*` when any such file exists, and an earlier layout's
    /// folder when it exists — each that applies, joined by "and" (the slot when none does).
    pub fn describe(&self) -> String {
        let slot = format!(
            "record slot of run {} in {}",
            self.id,
            self.record_slot().segment().display()
        );
        let mut parts = Vec::new();
        if self.slot_bytes().is_ok_and(|b| !b.is_empty()) {
            parts.push(slot.clone());
        }
        let flat = [
            self.flat_lock_path(),
            self.more_path(),
            self.flat_log_path(),
        ];
        if flat.iter().any(|p| p.exists()) {
            parts.push(
                self.runs
                    .join(format!("{}.*", self.id))
                    .display()
                    .to_string(),
            );
        }
        if self.folder().is_dir() {
            parts.push(format!("{}/", self.folder().display()));
        }
        if parts.is_empty() {
            return slot;
        }
        parts.join(" and ")
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
        self.flat_log_path()
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
    /// (another process, normally the shim) holds it — the slot's lock, or an earlier layout's
    /// lock file where the run has one. Creates the segment if missing, so that recovery can
    /// lock and tombstone a claim whose shim has not even opened it yet.
    ///
    /// Errors: I/O errors creating or opening the files, or from the locks.
    pub fn try_lock(&self) -> io::Result<Option<RunLock>> {
        let Some(mut lock) = self.own_lock(false)? else {
            return Ok(None);
        };
        for (place, path) in self.earlier_locks() {
            match open_lock_file(&path, false) {
                Ok(f) if files::try_lock_exclusive(&f)? => *place.of(&mut lock) = Some(f),
                Ok(_) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(lock))
    }

    /// `lock`, with every earlier layout's lock held too — `runs/<id>.lock` and the folder's
    /// `lock` — creating the files (and the folder) where missing: `Ok(None)` if another holder
    /// has one of them (a shim of an earlier version got there first; `lock` is released).
    /// Needed before a tombstone: a late shim of an earlier version locks and looks in its own
    /// layout only. The caller reads the records again under the returned lock, since such a
    /// shim may have written some in between.
    ///
    /// Errors: I/O errors creating or locking the earlier layouts' lock files.
    pub fn lock_earlier_too(&self, mut lock: RunLock) -> io::Result<Option<RunLock>> {
        for (place, path) in self.earlier_locks() {
            if place.of(&mut lock).is_some() {
                continue;
            }
            if place == Earlier::Folder {
                let folder = self.folder();
                match DirBuilder::new().mode(DIR_MODE).create(&folder) {
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                        return Err(naming(&folder, e))
                    }
                    _ => {}
                }
            }
            let f = open_lock_file(&path, true).map_err(|e| naming(&path, e))?;
            if !files::try_lock_exclusive(&f)? {
                return Ok(None);
            }
            *place.of(&mut lock) = Some(f);
        }
        Ok(Some(lock))
    }

    /// Takes the run's lock for its shim, waiting as long as another holder keeps it; creates
    /// `runs/` and the segment if missing. The shim calls this before anything else it does
    /// with the run's files, and checks the tombstones right after: a shim that was late to
    /// lock may find its claim given up by recovery, and must then not start the command.
    ///
    /// Errors: I/O errors creating or opening the segment, or from the lock.
    pub fn lock_blocking(&self) -> io::Result<RunLock> {
        match self.own_lock(true)? {
            Some(lock) => Ok(lock),
            None => Err(io::Error::other("a waiting lock came back untaken")),
        }
    }

    /// Whether the run's lock is held by another open file description — in practice, whether
    /// the run's shim is alive: its slot's lock, or an earlier layout's lock file. Probes
    /// without keeping anyone out; creates nothing (a missing file means nobody holds it).
    /// Note: a [`RunLock`] held by the calling process itself also counts as "held".
    ///
    /// Errors: I/O errors opening a file (other than "not found") or probing a lock.
    pub fn is_locked(&self) -> io::Result<bool> {
        let slot = self.record_slot();
        match slot.open(false) {
            Ok(segment) if slot.is_held(&segment)? => return Ok(true),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        for (_, path) in self.earlier_locks() {
            let file = match open_lock_file(&path, false) {
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

    /// Waits until no one holds the run's lock — its slot's lock and each earlier layout's
    /// lock file that exists (nothing is created) — taking and releasing each in turn. For a
    /// daemon that adopted a run and waits for its shim to end.
    ///
    /// Errors: I/O errors opening a file (other than "not found") or from a lock.
    pub fn wait_released(&self) -> io::Result<()> {
        let slot = self.record_slot();
        match slot.open(false) {
            Ok(segment) => {
                slot.lock(&segment, true)?;
                slot.unlock(&segment)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        for (_, path) in self.earlier_locks() {
            match open_lock_file(&path, false) {
                Ok(f) => files::lock_exclusive(&f)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether any file of the run exists: anything in its slot, its overflow, its log, or an
    /// earlier layout's lock file or folder.
    ///
    /// Errors: I/O errors other than "not found".
    pub fn exists(&self) -> io::Result<bool> {
        if !self.slot_bytes()?.is_empty() {
            return Ok(true);
        }
        for p in [
            self.more_path(),
            self.flat_lock_path(),
            self.folder(),
            self.flat_log_path(),
        ] {
            match fs::symlink_metadata(&p) {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// The newest record of each kind — from `runs/<id>.more`, then the slot, then
    /// `runs/<id>.lock`, then the earlier layout's folder (its `lock`, then the record's own
    /// file) — and every tombstone of them all. Nothing there is "no record". Lines that are
    /// not records are in [`Records::bad`], for the caller to report (and to fail closed on
    /// when the record it needs is missing).
    ///
    /// Errors: I/O errors, and `InvalidData` (naming the file) for an earlier version's record
    /// file that is not valid (never a panic).
    pub fn records(&self) -> io::Result<Records> {
        let slot = self.slot_bytes()?;
        Ok(self.gather(&slot)?.0)
    }

    /// What a shim that has just taken `held`, this run's lock, must know before it starts its
    /// claim `token`: whether recovery gave that claim up (as [`RunFiles::is_tombstoned`], and
    /// with its errors), and the newest `started` record (as [`RunFiles::read_started`], its
    /// error kept apart: an unreadable earlier record does not stop the claim). The slot is
    /// read through `held`'s own descriptor, on the path of every start.
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
        let own = match &held.slot {
            Some(slot) => slot.read(&held.file)?,
            None => read_all(&held.file)?,
        };
        let (records, folder) = self.gather(&own)?;
        held.more.set(Some(self.more_path().exists()));
        let tombstoned = if records.tombstones.contains(&token) {
            true
        } else if let Some(bad) = records.bad.first() {
            return Err(bad.to_error());
        } else {
            folder && self.folder_tombstoned(token)?
        };
        Ok((tombstoned, or_bad(records.started, &records.bad)))
    }

    /// The records of every layout, `own` being the bytes of the slot (or, for the test-only
    /// writer of the version just before, of `runs/<id>.lock`), newest first as
    /// [`RunFiles::records`] describes; and whether an earlier layout's folder exists.
    fn gather(&self, own: &[u8]) -> io::Result<(Records, bool)> {
        // A bad line is named by its number in the record slot: the slot, not its segment,
        // is what the number counts in.
        let own_path = if self.writes_flat() {
            self.flat_lock_path()
        } else {
            PathBuf::from(format!(
                "{} (record slot of run {})",
                self.lock_path().display(),
                self.id
            ))
        };
        let mut records = self.appended(&self.more_path())?;
        records.fill_from(super::records::decode(own, &own_path));
        if !self.writes_flat() {
            records.fill_from(self.appended(&self.flat_lock_path())?);
        }
        self.with_folder(records)
    }

    /// `records` completed from the earlier layout's folder as [`RunFiles::records`] describes,
    /// and whether that folder exists.
    fn with_folder(&self, mut records: Records) -> io::Result<(Records, bool)> {
        // One `stat` instead of four failed opens for a run of this version, on the shim's
        // start and every reap.
        match fs::symlink_metadata(self.folder()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((records, false)),
            _ => {}
        }
        records.fill_from(self.appended(&self.folder().join(LOCK_FILE))?);
        if records.started.is_none() {
            records.started = self.read_json(STARTED_FILE)?;
        }
        if records.running.is_none() {
            records.running = self.read_json(RUNNING_FILE)?;
        }
        if records.exit.is_none() {
            records.exit = self.read_json(EXIT_FILE)?;
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
    /// command"): a tombstone record in any layout's records, or the token in the earlier
    /// layout's `tombstones` file. Missing files mean no tombstones. A last line without its
    /// newline is a torn append from a crashed writer and is ignored (its writer never
    /// finished, so it never requeued the run).
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
    /// requeue the run: a tombstone record in the run's slot (or overflow), `fdatasync`ed; one
    /// appended to `runs/<id>.lock` (synced with `runs/`), where a late shim of the version
    /// just before looks; and the token appended to the earlier layout's `tombstones` (fsynced
    /// with its folder), where a late shim of the folder layouts looks. `held` must be this
    /// run's lock and cover the earlier layouts too ([`RunFiles::lock_earlier_too`]): a shim
    /// checks for tombstones only after taking its lock, so writing under every lock means no
    /// shim can be between its check and its start.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock or does not cover the earlier
    /// layouts; I/O errors.
    pub fn write_tombstone(&self, held: &RunLock, token: u64) -> io::Result<()> {
        self.check_held(held)?;
        if !held.covers_earlier() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tombstoning claim {token} of run {} needs the earlier layouts' locks too",
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
        if let Some(flat) = &held.flat {
            let path = self.flat_lock_path();
            append_line(flat, &super::records::encode(&record)?, true)
                .and_then(|()| sync_dir(&self.runs))
                .map_err(|e| naming(&path, e))?;
        }
        let folder = self.folder();
        let path = folder.join(TOMBSTONES_FILE);
        append_token(&path, token)
            .and_then(|()| sync_dir(&folder))
            .map_err(|e| naming(&path, e))
    }

    /// Appends the `started` record, without waiting for the disk: every reader sees it at once
    /// (the page cache), so its absence proves the command never started for as long as the
    /// machine does not restart, and recovery judges a claim made before a restart without it
    /// ([`crate::boot`]). The `exit` record's sync later makes it durable too. (The test-only
    /// writers of earlier layouts still sync it, as those versions did.)
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_started(&self, held: &RunLock, record: &StartedRecord) -> io::Result<()> {
        let earlier_layout = self.writes_folder() || self.writes_flat();
        self.append(held, &Record::Started(record.clone()), earlier_layout)?;
        self.sync_parent()
    }

    /// Appends the `running` record, without any sync: losing it in a machine crash loses
    /// nothing, since the command dies with the machine too.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_running(&self, held: &RunLock, record: &RunningRecord) -> io::Result<()> {
        self.append(held, &Record::Running(record.clone()), false)
    }

    /// Appends the `exit` record and makes it durable (`fdatasync`), before the shim releases
    /// the lock: the real status must survive the shim, and a crash of the machine right after
    /// the command ended.
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
        if let Some(slot) = &held.slot {
            if !self.overflowing(held) {
                return slot.append_torn(&held.file, &line);
            }
            let more = open_appending(&self.more_path(), true)?;
            let end = clean_end(&more)?;
            return more.write_all_at(&line[..line.len() / 2], end);
        }
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

    /// Removes every file of the run — its log and a compaction's side file, its overflow, the
    /// earlier layouts' lock file and folder — then empties its record slot, while holding its
    /// lock (`held`), so that no shim of the run can start in between. `Ok(false)` when
    /// something appeared in the folder while it went, every time of `tries`: the rest is left
    /// for later. For prune, which removes only runs that ended. Files already gone are fine.
    ///
    /// The tombstones stay: a claim recovery gave up may still have a shim on its way, stopped
    /// (frozen, swapped out) before its lock for as long as it took the run to be requeued, end
    /// and be pruned; it must find its tombstone whenever it comes. (A shim of an earlier
    /// version looks in its own layout only, which goes: one that had not opened its files
    /// before the prune is not covered, as it was not by the versions that wrote them.) So a run with any leaves
    /// its record slot holding them alone (made durable), which [`RunFiles::only_tombstones`]
    /// tells from a run's files; one without has its slot emptied (a hole punched).
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn remove(&self, held: RunLock, tries: usize) -> io::Result<bool> {
        self.check_held(&held)?;
        let tombstones = self.records()?.tombstones;
        let log = self.flat_log_path();
        for p in [Self::compacting_path(&log), log, self.more_path()] {
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
        // Last, still held: a crash before this leaves the slot (or the lock file), and so the
        // run, for the next prune to finish.
        remove_file(&self.flat_lock_path())?;
        if let Some(slot) = &held.slot {
            if tombstones.is_empty() {
                slot.clear(&held.file)?;
            } else {
                self.keep_only(slot, &held.file, &tombstones)?;
            }
        }
        drop(held);
        Ok(true)
    }

    /// Rewrites the record slot to hold tombstones of `tokens` alone, durably (see
    /// [`RunFiles::remove`]). Those that do not fit go on in `<id>.more` (a run given up more
    /// than fifty times). A tombstone is normally the first line of its slot (its claim never
    /// wrote one), so the rewrite puts a line of the same token and length where it was (only
    /// its time is the prune's): a write torn by a crash of the machine cannot lose a token.
    fn keep_only(&self, slot: &RecordSlot, segment: &File, tokens: &[u64]) -> io::Result<()> {
        let mut kept = Vec::new();
        let mut rest = Vec::new();
        for &token in tokens {
            let line = super::records::encode(&Record::Tombstone(TombstoneRecord {
                token,
                at: now_rfc3339(),
            }))?;
            if rest.is_empty() && kept.len() + line.len() <= segment::SLOT_LEN as usize {
                kept.extend(line);
            } else {
                rest.extend(line);
            }
        }
        kept.resize(segment::SLOT_LEN as usize, 0);
        segment.write_all_at(&kept, slot.range().start)?;
        segment.sync_data()?;
        if !rest.is_empty() {
            let path = self.more_path();
            let more = open_appending(&path, true).map_err(|e| naming(&path, e))?;
            append_line(&more, &rest, true).map_err(|e| naming(&path, e))?;
            sync_dir(&self.runs)?;
        }
        Ok(())
    }

    /// Whether the run's files are what prune leaves of a run with tombstones
    /// ([`RunFiles::remove`]): tombstones alone, in its record slot (and overflow) — no other
    /// record, no unreadable line, no log, no file of an earlier layout. `fleet check` does
    /// not take them for the files of a run the database lost.
    ///
    /// Errors: as [`RunFiles::records`], and I/O errors other than "not found" looking for the
    /// other files.
    pub fn only_tombstones(&self) -> io::Result<bool> {
        let records = self.records()?;
        let only = !records.tombstones.is_empty()
            && records.started.is_none()
            && records.running.is_none()
            && records.exit.is_none()
            && records.bad.is_empty();
        if !only {
            return Ok(false);
        }
        for p in [self.flat_lock_path(), self.folder(), self.flat_log_path()] {
            match fs::symlink_metadata(&p) {
                Ok(_) => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// `runs/<id>.log`, whether or not it exists.
    fn flat_log_path(&self) -> PathBuf {
        self.runs.join(format!("{}{LOG_SUFFIX}", self.id))
    }

    /// The bytes of the run's slot (empty when its segment does not exist).
    fn slot_bytes(&self) -> io::Result<Vec<u8>> {
        let slot = self.record_slot();
        match slot.open(false) {
            Ok(segment) => slot.read(&segment),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Whether this value's writes go to the earlier layout's folder (test-only writer).
    fn writes_folder(&self) -> bool {
        #[cfg(feature = "failpoints")]
        if self.layout == Layout::Folder {
            return true;
        }
        false
    }

    /// Whether this value's writes go to `runs/<id>.lock`, as the version just before's did
    /// (test-only writer).
    fn writes_flat(&self) -> bool {
        #[cfg(feature = "failpoints")]
        if self.layout == Layout::Flat {
            return true;
        }
        false
    }

    /// The lock files of the earlier layouts this value's lock must also cover to tombstone a
    /// claim, each with where a [`RunLock`] keeps it.
    fn earlier_locks(&self) -> Vec<(Earlier, PathBuf)> {
        if self.writes_folder() {
            return Vec::new();
        }
        let folder = (Earlier::Folder, self.folder().join(LOCK_FILE));
        if self.writes_flat() {
            return vec![folder];
        }
        vec![(Earlier::Flat, self.flat_lock_path()), folder]
    }

    /// This value's own lock: the slot's (`wait`: as long as it takes), or for the test-only
    /// writers of earlier layouts, an `flock` on their lock file. `Ok(None)` when held by
    /// another (never with `wait`).
    fn own_lock(&self, wait: bool) -> io::Result<Option<RunLock>> {
        let (file, slot, path) = match self.layout {
            Layout::Slots => {
                let slot = self.record_slot();
                let file = slot.open(true)?;
                if !slot.lock(&file, wait)? {
                    return Ok(None);
                }
                let path = slot.segment().to_path_buf();
                (file, Some(slot), path)
            }
            #[cfg(feature = "failpoints")]
            Layout::Flat | Layout::Folder => {
                let path = self.own_lock_path();
                let file = self.open_own_lock_file(&path)?;
                if wait {
                    files::lock_exclusive(&file)?;
                } else if !files::try_lock_exclusive(&file)? {
                    return Ok(None);
                }
                (file, None, path)
            }
        };
        Ok(Some(RunLock {
            id: self.id,
            file,
            slot,
            flat: None,
            folder: None,
            path,
            more: Cell::new(None),
        }))
    }

    /// The lock file the test-only writers of earlier layouts hold and append to.
    #[cfg(feature = "failpoints")]
    fn own_lock_path(&self) -> PathBuf {
        if self.writes_folder() {
            self.folder().join(LOCK_FILE)
        } else {
            self.flat_lock_path()
        }
    }

    /// Opens (creating it, and its folder, when missing) the lock file of a test-only writer
    /// of an earlier layout.
    #[cfg(feature = "failpoints")]
    fn open_own_lock_file(&self, path: &Path) -> io::Result<File> {
        match open_lock_file(path, true) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if self.writes_folder() {
                    DirBuilder::new()
                        .recursive(true)
                        .mode(DIR_MODE)
                        .create(self.folder())?;
                } else {
                    self.create_runs_dir()?;
                }
                open_lock_file(path, true)
            }
            other => other,
        }
    }

    /// The records appended to the file at `path` (none if it does not exist).
    fn appended(&self, path: &Path) -> io::Result<Records> {
        match fs::read(path) {
            Ok(bytes) => Ok(super::records::decode(&bytes, path)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Records::default()),
            Err(e) => Err(e),
        }
    }

    /// Whether `held`'s records go to `<id>.more` (see [`RunLock::more`]); looks once.
    fn overflowing(&self, held: &RunLock) -> bool {
        if let Some(known) = held.more.get() {
            return known;
        }
        let found = fs::symlink_metadata(self.more_path()).is_ok();
        held.more.set(Some(found));
        found
    }

    /// Appends `record`'s line where the holder of `held` writes: the run's slot, or once the
    /// slot is full its overflow file (made durable in `runs/` when this append creates it), or
    /// the test-only writers' lock file; `durable`: then `fdatasync`s it (which covers a file's
    /// new size, so an append is durable without the `fsync` of its timestamps).
    fn append(&self, held: &RunLock, record: &Record, durable: bool) -> io::Result<()> {
        self.check_held(held)?;
        let line = super::records::encode(record)?;
        let Some(slot) = &held.slot else {
            return append_line(&held.file, &line, durable);
        };
        if !self.overflowing(held) && slot.append(&held.file, &line, durable)? {
            return Ok(());
        }
        let path = self.more_path();
        let created = !path.exists();
        let more = open_appending(&path, true).map_err(|e| naming(&path, e))?;
        held.more.set(Some(true));
        append_line(&more, &line, durable).map_err(|e| naming(&path, e))?;
        if created {
            // A record in a file whose entry could vanish in a crash would prove nothing.
            sync_dir(&self.runs)?;
        }
        Ok(())
    }

    /// `fsync` of the folder holding the lock file a test-only writer of an earlier layout
    /// made (its entry must be durable before its `started` record counts). Nothing for this
    /// version's slots, whose segment's entry is durable since its first open.
    fn sync_parent(&self) -> io::Result<()> {
        if self.writes_folder() {
            sync_dir(&self.folder())
        } else if self.writes_flat() {
            sync_dir(&self.runs)
        } else {
            Ok(())
        }
    }

    fn check_held(&self, held: &RunLock) -> io::Result<()> {
        let own = match self.layout {
            Layout::Slots => self.lock_path(),
            #[cfg(feature = "failpoints")]
            Layout::Flat | Layout::Folder => self.own_lock_path(),
        };
        if held.id == self.id && held.path == own {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "writing run {}'s files requires its lock, but the lock given is run {}'s ({})",
                    self.id,
                    held.id,
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

/// Which earlier layout's lock file a [`RunLock`] holds besides the slot's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Earlier {
    /// `runs/<id>.lock`, the version just before this one.
    Flat,
    /// `runs/<id>/lock`, the folder layouts.
    Folder,
}

impl Earlier {
    /// Where `lock` keeps this layout's lock file.
    fn of(self, lock: &mut RunLock) -> &mut Option<File> {
        match self {
            Earlier::Flat => &mut lock.flat,
            Earlier::Folder => &mut lock.folder,
        }
    }
}

/// Appends `line` to `file` (a lock or overflow file only its writer's lock holder writes)
/// after cutting off a torn line a dead writer left (see [`super::records`]), in one positioned
/// write: a reader sees it whole or torn (and skips it), never two records run together.
/// `durable`: then `fdatasync`s it.
fn append_line(file: &File, line: &[u8], durable: bool) -> io::Result<()> {
    let end = clean_end(file)?;
    file.write_all_at(line, end)?;
    if durable {
        file.sync_data()?;
    }
    Ok(())
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
