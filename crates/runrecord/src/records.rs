//! A run's records — `started`, `running`, `exit`, and recovery's `tombstone` — and their
//! on-disk form, one JSON line each (see the crate documentation: what each means, when it is
//! written, what is durable). This module owns how a record is encoded, how lines are read
//! back, and what a torn or corrupt line means; it never opens a file and never decides a run's
//! fate.
//!
//! Why lines appended to the place the shim holds its lock on (its slot) rather than one file
//! per record: the shim holds it already, so a record costs one write (and, where it must
//! survive a machine crash, one `fdatasync`) instead of a new inode, a temporary file, a rename
//! and a folder fsync.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Written by the shim, durably, after it took the lock and found no tombstone, and *before* it
/// spawns the command. Its absence (for this token, with the lock free) proves the command never
/// started, which is what lets recovery requeue the same attempt instead of calling it `lost`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedRecord {
    /// The claim this shim serves (every record carries its claim).
    pub token: u64,
    /// The shim's pid.
    pub shim_pid: i32,
    /// The shim's start time: field 22 of `/proc/<shim_pid>/stat`, in clock ticks since boot
    /// (0 if `/proc` could not be read). With `shim_pid` it identifies the shim without trusting
    /// a bare pid ("any process signalled by fleet is identified first").
    pub shim_start_time: u64,
    /// When the record was written, RFC 3339 UTC.
    pub at: String,
    /// The token of every claim whose shim wrote a started record for this run, this one
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
    /// The shim did not start the command: the run's files already held the `started` record
    /// of another claim, so its command had been started once already (a database restored
    /// from an older backup that still queued the run, or another install's files with this
    /// run's id). Starting it again would be a second start of one attempt; the run ends `lost`
    /// (its fate, for this claim, is unknown). [`ExitRecord::error`] says which claim.
    AlreadyStarted,
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
    /// This claim started nothing: the run's files held the end of an earlier claim, `repeats`,
    /// whose command had run, and this record repeats that end (a database restored from an
    /// older backup queued the run again). Absent from every other exit record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<u64>,
}

impl ExitRecord {
    /// `finished_at` as milliseconds since the Unix epoch (UTC); `None` if it does not parse.
    pub fn finished_ms(&self) -> Option<i64> {
        chrono::DateTime::parse_from_rfc3339(&self.finished_at)
            .ok()
            .map(|t| t.timestamp_millis())
    }
}

/// Written by recovery, durably, once it gave up a claim whose command provably never started
/// (the lock free, no `started` record of it), while holding the run's lock, before it requeues
/// the run: a shim of that claim that takes the lock later finds it and does not start the
/// command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TombstoneRecord {
    /// The claim given up.
    pub token: u64,
    /// When it was given up, RFC 3339 UTC.
    pub at: String,
}

/// One line of a run's records: which record, and its fields (the tag is the `record`
/// key: `{"record":"started","token":…}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// See [`StartedRecord`].
    Started(StartedRecord),
    /// See [`RunningRecord`].
    Running(RunningRecord),
    /// See [`ExitRecord`].
    Exit(ExitRecord),
    /// See [`TombstoneRecord`].
    Tombstone(TombstoneRecord),
}

/// The newest record of each kind found in a run's records. A run claimed more than once
/// holds the records of every claim; callers compare tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    /// The last `started` record, if any.
    pub started: Option<StartedRecord>,
    /// The last `running` record, if any.
    pub running: Option<RunningRecord>,
    /// The last `exit` record, if any.
    pub exit: Option<ExitRecord>,
    /// The token of every `tombstone` record, in file order: claims recovery gave up.
    pub tombstones: Vec<u64>,
    /// Every complete line that is not a record, in file order. Any of them may have been a
    /// record of any kind: a reader that finds no valid record of the kind it needs must not
    /// take "none" for an answer while this is not empty.
    pub bad: Vec<BadLine>,
}

impl Records {
    /// Completes these records, read from a newer place, with `older`'s: each kind this holds
    /// none of is taken from `older`; the tombstones of both are kept (older first, each token
    /// once), and so are the bad lines (older first).
    pub fn fill_from(&mut self, older: Records) {
        if self.started.is_none() {
            self.started = older.started;
        }
        if self.running.is_none() {
            self.running = older.running;
        }
        if self.exit.is_none() {
            self.exit = older.exit;
        }
        // Older first, each token once.
        let mut tombstones = older.tombstones;
        for t in std::mem::take(&mut self.tombstones) {
            if !tombstones.contains(&t) {
                tombstones.push(t);
            }
        }
        self.tombstones = tombstones;
        let mut bad = older.bad;
        bad.append(&mut self.bad);
        self.bad = bad;
    }
}

/// A complete line of a run's records that is not a record (corruption: a writer writes whole
/// records, so this is someone else's write or a damaged disk).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// The record file.
    pub path: PathBuf,
    /// The line's number in the file, from 1.
    pub line: usize,
    /// Why it is not a record (the JSON parser's message, without its position inside the
    /// line).
    pub reason: String,
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {} of {}: not a run record ({})",
            self.line,
            self.path.display(),
            self.reason
        )
    }
}

impl std::error::Error for BadLine {}

impl BadLine {
    /// This bad line as an `InvalidData` error, for a reader that needed the record it may
    /// have held. The error carries the `BadLine` itself (`get_ref`), so that a caller can
    /// tell it names its file already.
    pub fn to_error(&self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, self.clone())
    }
}

/// `record` as one line: its JSON and a `\n`.
///
/// Errors: only if serialisation fails (it cannot for these types; kept total).
pub fn encode(record: &Record) -> io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

/// Reads the records out of the bytes of `path` (named in the bad lines only). Empty lines and
/// an incomplete last line (see the crate documentation) are skipped; a complete line that is not a
/// record goes to [`Records::bad`] and reading goes on past it. Never fails.
pub fn decode(bytes: &[u8], path: &Path) -> Records {
    let mut records = Records::default();
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => &bytes[..end],
        None => return records,
    };
    for (index, line) in complete.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(line) {
            Ok(Record::Started(s)) => records.started = Some(s),
            Ok(Record::Running(r)) => records.running = Some(r),
            Ok(Record::Exit(e)) => records.exit = Some(e),
            Ok(Record::Tombstone(t)) => records.tombstones.push(t.token),
            Err(e) => records.bad.push(BadLine {
                path: path.to_path_buf(),
                line: index + 1,
                reason: reason(&e),
            }),
        }
    }
    records
}

/// The parser's message without the " at line L column C" it appends: the position inside
/// one line means nothing to an operator, who is told the line's number in the file instead.
fn reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&position).unwrap_or(&text).to_string()
}

/// Where the complete lines of `bytes` end: the length to keep when cutting off a torn last
/// line (the whole length when there is none).
pub fn complete_len(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
}

/// Now, as RFC 3339 UTC with milliseconds (the format of every `at` field).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
