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
//! after the next append. A line that does not fit in what is left of the slot's 4 KiB (a run
//! claimed dozens of times: a tombstone per claim) goes to `<id>.more`, and so does every later
//! one of the run.
//!
//! Why slots in a shared segment: creating a file is what a start cost most on the disk (a new
//! inode; on a filesystem without a journal, a walk past every inode freed in the last minutes),
//! and a file per run needed an `fsync` of `runs/` before its `started` record counted. A run of
//! a command that writes nothing now creates no file at all (docs/PERFORMANCE.md). Locks on
//! different slots of a segment never conflict, and a probe (`F_OFD_GETLK`, [`ofd`]) takes no
//! lock, so recovery's and `fleet check`'s looks keep no shim waiting.
//!
//! Prune empties a run's slot (a hole punched in the segment) under its lock, after the run's
//! other files — but for its tombstones, which stay alone in the slot ([`RunFiles::remove`]): a
//! shim of a claim recovery gave up may come at any time, even after the run ended and was
//! pruned, and must still find its tombstone. `fleet check` takes a slot of tombstones alone
//! for what prune leaves ([`RunFiles::only_tombstones`]). The segment files themselves stay, one
//! per 1,024 runs, holding no blocks once all their runs are pruned; readers skip their holes
//! (`SEEK_DATA`), so a pruned segment costs a few system calls to look at.
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
//! right after it takes the lock, and starts nothing if it finds one. (The supervisor's
//! `settle` module turns these into a run's fate; a bad line where the claim's `exit` may have
//! been ends the run `lost` with a note saying its records could not be read.)
//!
//! # What each fsync buys
//!
//! A process crash (shim, daemon, command: SIGKILL, abort, OOM) loses nothing that was written:
//! the data is in the kernel's page cache, and every reader reads through it. An `fsync` is only
//! for a crash of the machine (power, kernel panic), which also kills every command, so what it
//! buys is the right verdict on the runs that crash interrupted. Per run the shim makes one (the
//! first row); each daemon makes two at its start (the second row: the file and the folder); the
//! first opener of a segment (once per 1,024 runs) makes those of the third; recovery makes the
//! others, only when it gives a claim up:
//!
//! | fsync | guarantee it buys (machine crash) | without it |
//! | --- | --- | --- |
//! | `fdatasync` of the segment after `exit` (it makes the claim's `started` record durable too) | a command that ended before the crash keeps its real status | recorded `lost` (and retried if it has retries) although it succeeded or failed |
//! | `fsync` of `<state_dir>/boot` (each daemon's epoch and the kernel's boot id, written as `boot.new`, synced, renamed) and of the state directory, by each daemon before its first claim (the supervisor's `boot` module) | a command that may have started is never taken for one that never did: after a restart of the machine, recovery knows which claims were made before it, and a missing `started` record of such a claim ends it `lost` instead of proving it never started | recovery could not tell a claim whose `started` record the crash lost from one that never started: it would requeue the same attempt, and a command that had started would run twice as that attempt |
//! | `fsync` of a new segment, then of `runs/`, then the header written and `fdatasync`ed ([`RecordSlot::open`]) | the segment's entry in `runs/` survives, so the records in it do | the file itself lost with every record in it: each claim's end recorded `lost`, and a claim with no record at all judged as the second row says; the header, written only after the `fsync` of `runs/`, tells every later opener that it need not sync again (one that finds none syncs itself) |
//! | `fsync` of `runs/` when a run's first line goes to `<id>.more` | the same, for the overflow file's entry | the same |
//! | `fdatasync` of the segment after a `tombstone` (recovery) | a claim recovery gave up stays given up once its requeue is committed | a late shim of that claim could find no tombstone and start the command beside the requeued run |
//!
//! The `started` record is not synced: until the machine restarts, every reader sees it through
//! the page cache, so its absence proves the command never started, and a claim made before a
//! restart is judged without it (the `boot` row above). Waiting for the disk before every spawn
//! cost about a tenth of a drain of short commands ("The shim's two syncs, measured apart" in
//! docs/PERFORMANCE.md); what it bought — a claim cut short between its commit and its
//! command's start by a restart of the machine queued again rather than ended `lost` — the
//! `boot` record buys with one sync per daemon start, for the price of that rare claim's retry.
//! The `running` record is not synced either (the command dies with the machine, so its pid is
//! worthless after one). Tombstones are written by recovery only: a tombstone lost in a machine
//! crash would let a late shim of the same claim start after the requeued run, and the claim
//! made before the crash is then gone from the database, so their syncs are cheap insurance on
//! a rare path. The database's own commits are durable too (SQLite's `synchronous = FULL`).
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

pub use files::{BeforeStart, RunFiles};
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
