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
//! A run may be claimed more than once (requeued after a crash, same attempt), so every record
//! carries the claim's `token`: readers compare it and never mistake an earlier claim's record
//! for the current one.
//!
//! Why a lock rather than a pid: the kernel drops an OFD lock (or an `flock`) when its holder
//! dies, so "the lock is free" proves the shim is gone, and no reused pid can be mistaken for
//! it.

use std::cell::Cell;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::segment::{self, RecordSlot};

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
/// Mode of `runs/`: the state directory is private (run logs and records are the operator's
/// business alone).
const DIR_MODE: u32 = 0o700;
/// Mode of every file of a run.
pub(super) const FILE_MODE: u32 = 0o600;

/// The files of one run under `<state_dir>/runs/`. Creating a value does no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFiles {
    id: i64,
    runs: PathBuf,
}

/// A run's lock, released when dropped (or when the holding process dies: the kernel drops it,
/// which is why a free lock proves the shim is gone): the OFD lock on the run's slot.
///
/// Methods that write a run's files take a `&RunLock` to prove the caller holds that run's lock.
#[derive(Debug)]
pub struct RunLock {
    /// Whose lock this is.
    id: i64,
    /// The run's segment, open for writing: the slot's lock is held through it.
    file: File,
    /// The slot locked through `file`.
    slot: RecordSlot,
    /// `file`'s path.
    path: PathBuf,
    /// Whether this run's records go to `<id>.more` (once one did, all later ones must, so
    /// that reading the slot, then the overflow, keeps their order); `None` until looked at.
    more: Cell<Option<bool>>,
}

impl RunLock {
    /// The file this lock's records go to: the run's segment (shared with other runs).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Closing the file would release the lock anyway; unlocking explicitly first keeps
        // the release at this exact point even if a descriptor were ever shared.
        let _ = self.slot.unlock(&self.file);
    }
}

impl RunFiles {
    /// The files of run `run_id` under `state_dir` (its slot in `<state_dir>/runs/records-…`,
    /// and `<state_dir>/runs/<run_id>.*`). No I/O.
    pub fn new(state_dir: &Path, run_id: i64) -> RunFiles {
        RunFiles {
            id: run_id,
            runs: state_dir.join(RUNS_DIR),
        }
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

    /// The run's overflow file, `runs/<id>.more` (it exists only for a run whose records
    /// outgrew its slot).
    pub fn more_path(&self) -> PathBuf {
        self.runs.join(format!("{}{MORE_SUFFIX}", self.id))
    }

    /// The run's files for a message: its record slot (`record slot of run <id> in <segment>`)
    /// when it holds anything, `<state_dir>/runs/<id>.*` when any such file exists — both,
    /// joined by "and", when both apply (the slot when neither does).
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
        if [self.more_path(), self.log_path()]
            .iter()
            .any(|p| p.exists())
        {
            parts.push(
                self.runs
                    .join(format!("{}.*", self.id))
                    .display()
                    .to_string(),
            );
        }
        if parts.is_empty() {
            return slot;
        }
        parts.join(" and ")
    }

    /// Path of the run's log (the command's stdout and stderr, every claim appended),
    /// `runs/<id>.log`, which exists only once the command wrote something. No I/O.
    pub fn log_path(&self) -> PathBuf {
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
    /// (another process, normally the shim) holds it. Creates the segment if missing, so that
    /// recovery can lock and tombstone a claim whose shim has not even opened it yet.
    ///
    /// Errors: I/O errors creating or opening the segment, or from the lock.
    pub fn try_lock(&self) -> io::Result<Option<RunLock>> {
        self.own_lock(false)
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
    /// the run's shim is alive. Probes without keeping anyone out; creates nothing (a missing
    /// segment means nobody holds it). Note: a [`RunLock`] held by the calling process itself
    /// also counts as "held".
    ///
    /// Errors: I/O errors opening the segment (other than "not found") or probing the lock.
    pub fn is_locked(&self) -> io::Result<bool> {
        let slot = self.record_slot();
        match slot.open(false) {
            Ok(segment) => slot.is_held(&segment),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until no one holds the run's lock (nothing is created), taking and releasing it.
    /// For a daemon that adopted a run and waits for its shim to end.
    ///
    /// Errors: I/O errors opening the segment (other than "not found") or from the lock.
    pub fn wait_released(&self) -> io::Result<()> {
        let slot = self.record_slot();
        match slot.open(false) {
            Ok(segment) => {
                slot.lock(&segment, true)?;
                slot.unlock(&segment)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether any file of the run exists: anything in its slot, its overflow or its log.
    ///
    /// Errors: I/O errors other than "not found".
    pub fn exists(&self) -> io::Result<bool> {
        if !self.slot_bytes()?.is_empty() {
            return Ok(true);
        }
        for p in [self.more_path(), self.log_path()] {
            match fs::symlink_metadata(&p) {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// The newest record of each kind — from `runs/<id>.more`, then the slot — and every
    /// tombstone of both. Nothing there is "no record". Lines that are not records are in
    /// [`Records::bad`], for the caller to report (and to fail closed on when the record it
    /// needs is missing).
    ///
    /// Errors: I/O errors.
    pub fn records(&self) -> io::Result<Records> {
        let slot = self.slot_bytes()?;
        self.gather(&slot)
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
        let own = held.slot.read(&held.file)?;
        let records = self.gather(&own)?;
        held.more.set(Some(self.more_path().exists()));
        let tombstoned = if records.tombstones.contains(&token) {
            true
        } else if let Some(bad) = records.bad.first() {
            return Err(bad.to_error());
        } else {
            false
        };
        Ok((tombstoned, or_bad(records.started, &records.bad)))
    }

    /// The records of the overflow completed with those of `own`, the bytes of the slot, as
    /// [`RunFiles::records`] describes.
    fn gather(&self, own: &[u8]) -> io::Result<Records> {
        // A bad line is named by its number in the record slot: the slot, not its segment,
        // is what the number counts in.
        let own_path = PathBuf::from(format!(
            "{} (record slot of run {})",
            self.lock_path().display(),
            self.id
        ));
        let mut records = self.appended(&self.more_path())?;
        records.fill_from(super::records::decode(own, &own_path));
        Ok(records)
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
    /// command"): a tombstone record of it in the run's records. Missing files mean no
    /// tombstones. A last line without its newline is a torn append from a crashed writer and
    /// is ignored (its writer never finished, so it never requeued the run).
    ///
    /// Errors: I/O errors, and `InvalidData` for a complete line that is not a record when no
    /// tombstone of `token` is found (it may have been that one) — the shim then refuses to
    /// start, failing closed.
    pub fn is_tombstoned(&self, token: u64) -> io::Result<bool> {
        let records = self.records()?;
        if records.tombstones.contains(&token) {
            return Ok(true);
        }
        match records.bad.first() {
            Some(bad) => Err(bad.to_error()),
            None => Ok(false),
        }
    }

    /// Records that claim `token` is dead, durably before it returns, so that recovery may
    /// requeue the run: a tombstone record in the run's slot (or overflow), `fdatasync`ed.
    /// `held` must be this run's lock: a shim checks for tombstones only after taking it, so
    /// writing under it means no shim can be between its check and its start.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_tombstone(&self, held: &RunLock, token: u64) -> io::Result<()> {
        let record = Record::Tombstone(TombstoneRecord {
            token,
            at: now_rfc3339(),
        });
        self.append(held, &record, true)
    }

    /// Appends the `started` record, without waiting for the disk: every reader sees it at once
    /// (the page cache), so its absence proves the command never started for as long as the
    /// machine does not restart, and recovery judges a claim made before a restart without it
    /// ([`crate::boot`]). The `exit` record's sync later makes it durable too.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn write_started(&self, held: &RunLock, record: &StartedRecord) -> io::Result<()> {
        self.append(held, &Record::Started(record.clone()), false)
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
        if !self.overflowing(held) {
            return held.slot.append_torn(&held.file, &line);
        }
        let more = open_appending(&self.more_path(), true)?;
        let end = clean_end(&more)?;
        more.write_all_at(&line[..line.len() / 2], end)
    }

    /// Opens the run's log ([`RunFiles::log_path`]) for appending, creating it with mode 0600 if
    /// missing; a symbolic link in its place is an error (`ELOOP`), never followed. Append,
    /// because a run may be claimed more than once and every claim's output is kept.
    ///
    /// Errors: I/O errors (e.g. `runs/` does not exist).
    pub fn open_log(&self) -> io::Result<File> {
        open_appending(&self.log_path(), false)
    }

    /// Removes every file of the run — its log and a compaction's side file, its overflow —
    /// then empties its record slot, while holding its lock (`held`), so that no shim of the
    /// run can start in between. For prune, which removes only runs that ended. Files already
    /// gone are fine.
    ///
    /// The tombstones stay: a claim recovery gave up may still have a shim on its way, stopped
    /// (frozen, swapped out) before its lock for as long as it took the run to be requeued, end
    /// and be pruned; it must find its tombstone whenever it comes. So a run with any leaves
    /// its record slot holding them alone (made durable), which [`RunFiles::only_tombstones`]
    /// tells from a run's files; one without has its slot emptied (a hole punched).
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
    pub fn remove(&self, held: RunLock) -> io::Result<()> {
        self.check_held(&held)?;
        let tombstones = self.records()?.tombstones;
        let log = self.log_path();
        for p in [Self::compacting_path(&log), log, self.more_path()] {
            remove_file(&p)?;
        }
        // Last, still held: a crash before this leaves the slot, and so the run, for the next
        // prune to finish.
        if tombstones.is_empty() {
            held.slot.clear(&held.file)?;
        } else {
            self.keep_only(&held.slot, &held.file, &tombstones)?;
        }
        drop(held);
        Ok(())
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
    /// record, no unreadable line, no log. `fleet check` does not take them for the files of a
    /// run the database lost.
    ///
    /// Errors: as [`RunFiles::records`], and I/O errors other than "not found" looking for the
    /// log.
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
        match fs::symlink_metadata(self.log_path()) {
            Ok(_) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(e),
        }
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

    /// The slot's lock (`wait`: as long as it takes). `Ok(None)` when held by another (never
    /// with `wait`).
    fn own_lock(&self, wait: bool) -> io::Result<Option<RunLock>> {
        let slot = self.record_slot();
        let file = slot.open(true)?;
        if !slot.lock(&file, wait)? {
            return Ok(None);
        }
        let path = slot.segment().to_path_buf();
        Ok(Some(RunLock {
            id: self.id,
            file,
            slot,
            path,
            more: Cell::new(None),
        }))
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

    /// Appends `record`'s line to the run's slot, or once the slot is full to its overflow
    /// file (made durable in `runs/` when this append creates it); `durable`: then
    /// `fdatasync`s it (which covers a file's new size, so an append is durable without the
    /// `fsync` of its timestamps).
    fn append(&self, held: &RunLock, record: &Record, durable: bool) -> io::Result<()> {
        self.check_held(held)?;
        let line = super::records::encode(record)?;
        if !self.overflowing(held) && held.slot.append(&held.file, &line, durable)? {
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

    fn check_held(&self, held: &RunLock) -> io::Result<()> {
        if held.id == self.id && held.path == self.lock_path() {
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
}

/// Appends `line` to `file` (an overflow file only its run's lock holder writes) after cutting
/// off a torn line a dead writer left (see [`super::records`]), in one positioned write: a
/// reader sees it whole or torn (and skips it), never two records run together. `durable`:
/// then `fdatasync`s it.
fn append_line(file: &File, line: &[u8], durable: bool) -> io::Result<()> {
    let end = clean_end(file)?;
    file.write_all_at(line, end)?;
    if durable {
        file.sync_data()?;
    }
    Ok(())
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

/// fsync of a folder, which makes a new entry in it durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests;
