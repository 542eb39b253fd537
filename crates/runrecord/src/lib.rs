//! fleet's run records: the files under `<state_dir>/runs/` that say what became of each run.
//! A run's shim writes them; the daemon's recovery and reap, `fleet check`, prune, `fleet logs`
//! and the HTTP log read them, and recovery writes tombstones. This crate owns their format and
//! the locks on them. It never decides a run's fate (the supervisor's `settle` does, from what
//! these files say), never starts or signals a process, and knows nothing of the database.
//!
//! These files are how a run's fate is known after a daemon crash: the shim outlives the
//! daemon, and the next daemon learns from them whether the run is alive, ended (and how), or
//! provably never started.
//!
//! # A stable format
//!
//! This is the first stable format of fleet's run records: the one version 0.1.0 writes (a
//! segment's header says `fleet run records 1`). A later version must read it as it is, since a
//! state directory with runs in flight is handed from one version to the next at an upgrade.
//! `tests/fixtures/v0.1.0/` holds a state directory written by 0.1.0, and the `upgrade` test
//! starts the version under test on it.
//!
//! # Files
//!
//! | file                       | written by         | what                                                |
//! | -------------------------- | ------------------ | --------------------------------------------------- |
//! | `records-<first id>`       | shims, recovery    | a segment: the record slots of 1,024 runs; a run's slot is locked (an OFD lock on its bytes) by its shim for its whole life, and holds the run's records and tombstones |
//! | `<id>.more`                | shim, recovery     | the records that no longer fit in the slot, appended (rare: a run claimed many times) |
//! | `<id>.log`                 | command, via shim  | its stdout and stderr, appended to by every claim; made at the first output |
//! | `<id>.log.compacting`      | shim               | a log compaction's side file, for an instant        |
//!
//! No other name in `runs/` is a run's: [`list_run_ids`] skips them. Files are made with mode
//! 0600 and `runs/` with 0700; a symbolic link planted where a segment, an overflow file or a
//! log goes is an error (`O_NOFOLLOW`), never followed to write the run's records or output
//! elsewhere.
//!
//! # Segments and record slots
//!
//! Runs are grouped by id into segments of [`RUNS_PER_SEGMENT`] runs, one file each,
//! `runs/records-<first id>` (`records-0` holds runs 1–1023, `records-1024` runs 1024–2047, …),
//! made once by whoever first needs it, so that starting a run creates no file (a new inode is
//! what a start cost most on the disk):
//!
//! | bytes                                   | what                                                   |
//! | --------------------------------------- | ------------------------------------------------------ |
//! | `0 .. 4096`                             | the header: [`HEADER`] once the file's entry in `runs/` is durable |
//! | `4096 × (1 + id mod 1024)`, 4096 bytes  | run `id`'s record slot: its record lines, then zeros   |
//!
//! The run's lock is an exclusive OFD lock (`F_OFD_SETLK`) on its slot's bytes. The kernel drops
//! it when the holder's last descriptor closes — when the shim dies — so "the slot's lock is
//! free" proves the shim gone, and no reused pid can be mistaken for it. Locks on different
//! slots of one segment never conflict. A slot's records are written from its start; the first
//! zero byte ends them. Every append writes the new line and zeros to the end of the slot in
//! one positioned write, so that whatever a crash left past the last complete line is gone
//! after the next append. A line that does not fit in what is left of the slot goes to
//! `<id>.more`, and so does every later one of the run. Prune empties a slot by punching a hole
//! in the segment; a slot that holds tombstones keeps them alone.
//!
//! # Records
//!
//! Each record is one line of JSON, its kind in the `record` key
//! (`{"record":"started","token":…}`; the fields are [`StartedRecord`], [`RunningRecord`],
//! [`ExitRecord`] and [`TombstoneRecord`]). A run may be claimed more than once (requeued after
//! a crash, same attempt), so every record carries its claim's `token`: readers compare it and
//! never mistake an earlier claim's record for the current one. Readers take the newest record
//! of each kind, `<id>.more` before the slot.
//!
//! | record      | written                                              | durable                        |
//! | ----------- | ---------------------------------------------------- | ------------------------------ |
//! | `started`   | by the shim, holding the lock, before it spawns the command | no: visible to every reader at once (the page cache), on disk with the `exit` record's sync or the kernel's writeback; the daemon tells a restart of the machine apart, which may lose it |
//! | `running`   | by the shim, right after the spawn (the command's pid) | no: a machine crash takes the command with it |
//! | `exit`      | by the shim, once the command's whole process group is gone, before it lets go of the lock | `fdatasync` of the segment (or of `<id>.more`) |
//! | `tombstone` | by recovery, holding the lock, once it gave a claim up | `fdatasync` of the segment (or of `<id>.more`) |
//!
//! A segment's entry in `runs/` is made durable once, by its first opener, before anything in it
//! counts (the header is written after the `fsync` of `runs/`); so is a `<id>.more` by the
//! writer that makes it.
//!
//! A line is complete when it ends with `\n`. A writer writes a whole line in one call, so the
//! only incomplete line is the last one, left by a writer that died mid-write: that record never
//! counted, readers skip it, and the next holder of the lock cuts it off before appending. A
//! complete line that is not a record is corruption: readers set it aside as a [`BadLine`] and
//! read on, and callers fail closed when the record they need could be the unreadable one.
//!
//! So, with the lock free: an `exit` record of the claim means the run ended with that status;
//! a `started` record of the claim without its `exit` means the command may have run and its
//! end is unknown; no `started` record of the claim means the command never started (unless the
//! machine may have restarted since the claim). A shim checks for a tombstone of its claim
//! right after it takes the lock, and starts nothing if it finds one.
//!
//! # The log
//!
//! `<id>.log` is what the command wrote, every claim's output appended. A run whose command
//! never writes a byte has no log: readers take a missing log for an empty one. A log with a
//! size bound (`max_log_size`) starts, once the bound was reached, with one marker line saying
//! how many bytes were dropped in all ([`marker_line`], [`parse_marker`]), then the newest
//! output; see [`log`].
//!
//! # Modules
//!
//! Each module uses only those above it in this list: [`names`] (the names and modes in
//! `runs/`), `disk` (opening and appending to files), [`ofd`] (byte-range locks),
//! [`records`] (the record lines), [`slot`] (segments and their slots), [`lock`] (a run's lock),
//! [`files`] (a run's files: paths, reading, locking), `write` (writing a run's records and
//! removing its files), [`listing`] (which runs have files in `runs/`), [`log`] (the bounded
//! log).

pub mod files;
pub mod listing;
pub mod lock;
pub mod log;
pub mod names;
pub mod ofd;
pub mod records;
pub mod slot;

mod disk;
mod write;

pub use files::RunFiles;
pub use listing::{highest_run_ids, list_run_ids, live_run_candidates};
pub use lock::RunLock;
pub use log::{marker_line, parse_marker, BoundedLog, MARKER_MAX_LEN, MIN_MAX_LOG_SIZE};
pub use names::{COMPACTING_SUFFIX, LOG_SUFFIX, MORE_SUFFIX, RUNS_DIR};
pub use records::{
    now_rfc3339, BadLine, ExitRecord, Outcome, Record, Records, RunningRecord, StartedRecord,
    TombstoneRecord,
};
pub use slot::{RecordSlot, HEADER, RUNS_PER_SEGMENT, SLOT_LEN};

#[cfg(test)]
mod tests;
