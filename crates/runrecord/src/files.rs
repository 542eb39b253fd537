//! A run's files under `<state_dir>/runs/` (see the crate documentation): where they are, what
//! they hold, and the run's lock. Writing them is the `write` module's; what they mean for the
//! run's fate is the caller's to decide.

use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::disk::open_appending;
use crate::lock::RunLock;
use crate::names::{COMPACTING_SUFFIX, DIR_MODE, LOG_SUFFIX, MORE_SUFFIX, RUNS_DIR};
use crate::records::{self, BadLine, ExitRecord, Records, RunningRecord, StartedRecord};
use crate::slot::RecordSlot;

/// The files of one run under `<state_dir>/runs/`. Creating a value does no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFiles {
    pub(crate) id: i64,
    pub(crate) runs: PathBuf,
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
        RunLock::take(self.record_slot(), self.id, false)
    }

    /// Takes the run's lock for its shim, waiting as long as another holder keeps it; creates
    /// `runs/` and the segment if missing. The shim calls this before anything else it does
    /// with the run's files, and checks the tombstones right after: a shim that was late to
    /// lock may find its claim given up by recovery, and must then not start the command.
    ///
    /// Errors: I/O errors creating or opening the segment, or from the lock.
    pub fn lock_blocking(&self) -> io::Result<RunLock> {
        match RunLock::take(self.record_slot(), self.id, true)? {
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
        match slot.open_to_read() {
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
    /// claim `token` ([`BeforeStart`]): whether recovery gave that claim up (as
    /// [`RunFiles::is_tombstoned`], and with its errors), the newest `started` record (as
    /// [`RunFiles::read_started`], its error kept apart: an unreadable earlier record does not
    /// stop the claim), and that earlier claim's `exit` record, if the files hold it. The slot
    /// is read through `held`'s own descriptor, on the path of every start.
    ///
    /// Errors: `InvalidInput` if `held` is another run's lock; as [`RunFiles::is_tombstoned`].
    pub fn before_start(&self, held: &RunLock, token: u64) -> io::Result<BeforeStart> {
        held.check(self.id, &self.lock_path())?;
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
        let earlier_token = records.started.as_ref().map(|s| s.token);
        let earlier_end = records
            .exit
            .filter(|e| Some(e.token) == earlier_token && e.token != token);
        Ok(BeforeStart {
            tombstoned,
            earlier: or_bad(records.started, &records.bad),
            earlier_end,
        })
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

    /// Opens the run's log ([`RunFiles::log_path`]) for appending, creating it with mode 0600 if
    /// missing; a symbolic link in its place is an error (`ELOOP`), never followed. Append,
    /// because a run may be claimed more than once and every claim's output is kept.
    ///
    /// Errors: I/O errors (e.g. `runs/` does not exist).
    pub fn open_log(&self) -> io::Result<File> {
        open_appending(&self.log_path(), false)
    }

    /// The bytes of the run's slot (empty when its segment does not exist).
    pub(crate) fn slot_bytes(&self) -> io::Result<Vec<u8>> {
        let slot = self.record_slot();
        match slot.open_to_read() {
            Ok(segment) => slot.read(&segment),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
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
        let more = self.more_path();
        let mut records = match fs::read(&more) {
            Ok(bytes) => records::decode(&bytes, &more),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Records::default(),
            Err(e) => return Err(e),
        };
        records.fill_from(records::decode(own, &own_path));
        Ok(records)
    }
}

/// `found`, or failing that an error for the first of `bad`, or failing that none.
/// What a run's files say to a shim about to start a claim ([`RunFiles::before_start`]).
#[derive(Debug)]
pub struct BeforeStart {
    /// Recovery gave this claim up: the shim must not start it.
    pub tombstoned: bool,
    /// The newest `started` record, of whichever claim (an error when it cannot be read).
    pub earlier: io::Result<Option<StartedRecord>>,
    /// The `exit` record of the claim that wrote [`BeforeStart::earlier`], when that is
    /// another claim and the files hold how its command ended.
    pub earlier_end: Option<ExitRecord>,
}

fn or_bad<T>(found: Option<T>, bad: &[BadLine]) -> io::Result<Option<T>> {
    match (found, bad.first()) {
        (Some(r), _) => Ok(Some(r)),
        (None, Some(line)) => Err(line.to_error()),
        (None, None) => Ok(None),
    }
}
