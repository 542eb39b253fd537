//! Segments and record slots: where a run's records and its lock live without a file of the
//! run's own (not to be confused with the daemon's slot pool, which is in memory). The byte
//! layout is the crate documentation's; this module reads and writes it, takes a slot's lock,
//! and finds the used and the held slots of a segment. It never decides what a record means.
//!
//! Why: creating a file is what a start cost most. On a filesystem without a journal (common on
//! virtual machines), allocating an inode walks past every inode freed in the last minutes, and
//! a drain frees and allocates thousands; a new file per run also needed an `fsync` of `runs/`
//! before its `started` record counted. A slot in a segment that exists already costs a write
//! into a file and nothing more: measured in docs/PERFORMANCE.md.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::names::{DIR_MODE, FILE_MODE};
use crate::ofd::{self, Range};

/// How many runs share one segment file.
pub const RUNS_PER_SEGMENT: i64 = 1024;
/// The length of one run's slot, and of the segment's header, in bytes: one page, so that a
/// slot's write touches one page of the page cache and one block of the disk.
pub const SLOT_LEN: u64 = 4096;
/// The start of a segment file's name; the rest is the first run id it holds.
pub const SEGMENT_PREFIX: &str = "records-";
/// What a segment's first bytes say once its entry in `runs/` is durable. Written only after
/// that folder's `fsync`, so finding it proves the entry survives a crash of the machine: a
/// `started` record in a segment whose entry could vanish would not prove anything.
pub const HEADER: &[u8] = b"fleet run records 1\n";

/// One run's slot: which segment file, and which bytes of it. Making one does no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSlot {
    segment: PathBuf,
    range: Range,
}

impl RecordSlot {
    /// The slot of run `id`, whose segment lives in the folder `runs`.
    pub fn of(runs: &Path, id: i64) -> RecordSlot {
        let first = id.div_euclid(RUNS_PER_SEGMENT) * RUNS_PER_SEGMENT;
        let index = id.rem_euclid(RUNS_PER_SEGMENT) as u64;
        RecordSlot {
            segment: runs.join(format!("{SEGMENT_PREFIX}{first}")),
            range: Range {
                start: SLOT_LEN * (1 + index),
                len: SLOT_LEN,
            },
        }
    }

    /// The segment file's path.
    pub fn segment(&self) -> &Path {
        &self.segment
    }

    /// The slot's bytes within the segment.
    pub fn range(&self) -> Range {
        self.range
    }

    /// Opens the segment read-write, close-on-exec, never through a symbolic link. With
    /// `create`, makes `runs/` and the segment when missing and makes sure the segment's entry
    /// in `runs/` is durable ([`HEADER`]); the first opener pays two `fsync`s, every later one
    /// a read of the header.
    ///
    /// Errors: `NotFound` without `create` when the segment does not exist; other I/O errors.
    pub fn open(&self, create: bool) -> io::Result<File> {
        let file = match open_lock_file(&self.segment, create) {
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                if let Some(runs) = self.segment.parent() {
                    DirBuilder::new()
                        .recursive(true)
                        .mode(DIR_MODE)
                        .create(runs)?;
                }
                open_lock_file(&self.segment, create)?
            }
            other => other?,
        };
        if create {
            self.make_durable(&file)?;
        }
        Ok(file)
    }

    /// Opens the segment for reading only (its records, and probes of its locks, which take
    /// none): what a reader needs, on a read-only file system too. Close-on-exec, never
    /// through a symbolic link.
    ///
    /// Errors: `NotFound` when the segment does not exist; other I/O errors.
    pub fn open_to_read(&self) -> io::Result<File> {
        open_to_read(&self.segment)
    }

    /// Writes [`HEADER`] once the segment's entry is durable, unless it is there already.
    fn make_durable(&self, file: &File) -> io::Result<()> {
        let mut head = [0u8; HEADER.len()];
        if read_full(file, &mut head, 0)? == HEADER.len() && head == HEADER {
            return Ok(());
        }
        // Made by this open or by one racing it: its entry may not be on disk yet. Every
        // opener that finds no header syncs, so none goes on before the entry is durable.
        file.sync_all()?;
        if let Some(runs) = self.segment.parent() {
            File::open(runs)?.sync_all()?;
        }
        file.write_all_at(HEADER, 0)?;
        file.sync_data()
    }

    /// Takes the slot's lock through `file` (this segment, open for writing), waiting with
    /// `wait`: `Ok(false)` when another open file description holds it (never with `wait`).
    ///
    /// Errors: as [`ofd::lock_range`].
    pub fn lock(&self, file: &File, wait: bool) -> io::Result<bool> {
        ofd::lock_range(file, self.range, wait)
    }

    /// Releases the slot's lock held through `file`.
    ///
    /// Errors: as [`ofd::unlock_range`].
    pub fn unlock(&self, file: &File) -> io::Result<()> {
        ofd::unlock_range(file, self.range)
    }

    /// Whether an open file description other than `file`'s holds the slot's lock: a probe that
    /// takes no lock.
    ///
    /// Errors: as [`ofd::held_range`].
    pub fn is_held(&self, file: &File) -> io::Result<bool> {
        Ok(ofd::held_range(file, self.range)?.is_some())
    }

    /// The slot's bytes up to its first zero byte: its record lines, a torn last one included.
    ///
    /// Errors: I/O errors reading the segment.
    pub fn read(&self, file: &File) -> io::Result<Vec<u8>> {
        let mut bytes = vec![0u8; SLOT_LEN as usize];
        let got = read_full(file, &mut bytes, self.range.start)?;
        bytes.truncate(got);
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        bytes.truncate(end);
        Ok(bytes)
    }

    /// Appends `line` (a whole record line, `\n` included) after the slot's complete lines,
    /// in one positioned write that also zeroes the rest of the slot (cutting off a torn last
    /// line a dead writer left); `durable`: then `fdatasync`s the segment. `Ok(false)`, with
    /// nothing written, when the line does not fit in what is left of the slot. Only the
    /// holder of the slot's lock may call it.
    ///
    /// Errors: I/O errors reading or writing the segment.
    pub fn append(&self, file: &File, line: &[u8], durable: bool) -> io::Result<bool> {
        let used = self.read(file)?;
        let keep = crate::records::complete_len(&used);
        let room = SLOT_LEN as usize - keep;
        if line.len() > room {
            return Ok(false);
        }
        let mut bytes = Vec::with_capacity(room);
        bytes.extend_from_slice(line);
        bytes.resize(room, 0);
        file.write_all_at(&bytes, self.range.start + keep as u64)?;
        if durable {
            file.sync_data()?;
        }
        Ok(true)
    }

    /// Writes the first half of `line` after the slot's complete lines and nothing more, as a
    /// writer that dies mid-write leaves it: for the failpoints that crash there. Test builds
    /// only.
    ///
    /// Errors: I/O errors.
    #[cfg(feature = "torn-writes")]
    pub fn append_torn(&self, file: &File, line: &[u8]) -> io::Result<()> {
        let used = self.read(file)?;
        let keep = crate::records::complete_len(&used);
        let half = &line[..line.len() / 2];
        if keep + half.len() > SLOT_LEN as usize {
            return Ok(());
        }
        file.write_all_at(half, self.range.start + keep as u64)
    }

    /// Empties the slot (a hole punched in the segment; zeros written where the filesystem
    /// cannot punch one). For prune, under the slot's lock, once every other file of the run
    /// is gone.
    ///
    /// Errors: I/O errors.
    pub fn clear(&self, file: &File) -> io::Result<()> {
        let punch = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        match rustix::fs::fallocate(file, punch, self.range.start, self.range.len) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {
                file.write_all_at(&vec![0u8; SLOT_LEN as usize], self.range.start)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// The first run id of the segment file called `name` (`records-<first id>`, written as fleet
/// writes it: a multiple of [`RUNS_PER_SEGMENT`], no sign, no leading zero), else `None`.
pub fn segment_first_id(name: &str) -> Option<i64> {
    let first: i64 = name.strip_prefix(SEGMENT_PREFIX)?.parse().ok()?;
    let canonical =
        first >= 0 && first % RUNS_PER_SEGMENT == 0 && format!("{SEGMENT_PREFIX}{first}") == name;
    canonical.then_some(first)
}

/// The ids of the runs whose record slots in the segment at `path` (first id `first`) hold
/// anything, ascending. Reads only what the segment holds (`SEEK_DATA`): the slots of pruned
/// runs are holes, so a segment of pruned runs costs a few system calls, not 4 MiB of zeros.
///
/// Errors: I/O errors opening or reading it.
pub fn used_ids(path: &Path, first: i64) -> io::Result<Vec<i64>> {
    let file = open_to_read(path)?;
    let mut chunk = vec![0u8; (SLOT_LEN * BATCH) as usize];
    let mut ids = Vec::new();
    for batch in 0..BATCHES {
        ids.extend(used_in_batch(&file, batch, &mut chunk)?);
    }
    Ok(to_ids(first, ids))
}

/// Up to `limit` of the highest ids of [`used_ids`], highest first: reads the segment from its
/// end down, only as far as it must. What a daemon reads before its first claim.
///
/// Errors: as [`used_ids`].
pub fn used_ids_from_top(path: &Path, first: i64, limit: usize) -> io::Result<Vec<i64>> {
    let file = open_to_read(path)?;
    let mut chunk = vec![0u8; (SLOT_LEN * BATCH) as usize];
    let mut ids = Vec::new();
    for batch in (0..BATCHES).rev() {
        if ids.len() >= limit {
            break;
        }
        ids.extend(
            to_ids(first, used_in_batch(&file, batch, &mut chunk)?)
                .into_iter()
                .rev(),
        );
    }
    ids.truncate(limit);
    Ok(ids)
}

/// How many record slots a scan reads at a time, and how many such runs a segment has.
const BATCH: u64 = 64;
const BATCHES: u64 = RUNS_PER_SEGMENT as u64 / BATCH;

/// The indexes (0 to 1023) of the record slots of run of slots `batch` of `file`, a segment,
/// whose first byte is not zero, ascending; none without a read when the run of slots is a hole
/// (`SEEK_DATA`; a filesystem that cannot tell reports it all as data). `chunk` holds a run.
fn used_in_batch(file: &File, batch: u64, chunk: &mut [u8]) -> io::Result<Vec<u64>> {
    let start = SLOT_LEN * (1 + batch * BATCH);
    match rustix::fs::seek(file, rustix::fs::SeekFrom::Data(start)) {
        Ok(data) if data < start + SLOT_LEN * BATCH => {}
        // Holes to the end of this run of slots, or of the file.
        Ok(_) | Err(rustix::io::Errno::NXIO) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    }
    let got = read_full(file, chunk, start)?;
    Ok(chunk[..got]
        .chunks(SLOT_LEN as usize)
        .enumerate()
        .filter(|(_, slot)| slot.first().is_some_and(|&b| b != 0))
        .map(|(i, _)| batch * BATCH + i as u64)
        .collect())
}

/// Slot indexes of the segment of first id `first` as run ids (run 0 is no run).
fn to_ids(first: i64, indexes: Vec<u64>) -> Vec<i64> {
    indexes
        .into_iter()
        .map(|index| first + index as i64)
        .filter(|&id| id > 0)
        .collect()
}

/// The ids of the runs whose slot locks someone holds in the segment at `path` (first id
/// `first`): the shims alive there. Probes without taking a lock; costs a few probes per
/// held slot, not one per slot.
///
/// Errors: I/O errors opening the segment or probing its locks.
pub fn held_ids(path: &Path, first: i64) -> io::Result<Vec<i64>> {
    let file = open_to_read(path)?;
    let mut ids = Vec::new();
    let all = Range {
        start: SLOT_LEN,
        len: SLOT_LEN * RUNS_PER_SEGMENT as u64,
    };
    // A probe names one holder of a range, not necessarily the lowest: split around it.
    let mut pending = vec![all];
    while let Some(range) = pending.pop() {
        let Some(held) = ofd::held_range(&file, range)? else {
            continue;
        };
        let end = range.start + range.len;
        let first_slot = held.start.max(range.start) / SLOT_LEN;
        let last_slot = (held.start + held.len).min(end).div_ceil(SLOT_LEN);
        for slot in first_slot..last_slot {
            if slot >= 1 {
                ids.push(first + slot as i64 - 1);
            }
        }
        let below = first_slot * SLOT_LEN;
        if below > range.start {
            pending.push(Range {
                start: range.start,
                len: below - range.start,
            });
        }
        let above = last_slot * SLOT_LEN;
        if above < end {
            pending.push(Range {
                start: above,
                len: end - above,
            });
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids.into_iter().filter(|&id| id > 0).collect())
}

/// Opens a segment, the file that holds run locks, read-write (`create`: mode 0600 when
/// made).
pub(crate) fn open_lock_file(path: &Path, create: bool) -> io::Result<File> {
    // O_CLOEXEC (std sets it anyway; spelled out because it is load-bearing): the command must
    // not inherit the open file description that holds its run's lock, or the lock would
    // outlive the shim and recovery would believe the shim alive. O_NOFOLLOW: a link planted
    // in its place is an error, never a file elsewhere that the records would be written to.
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .mode(FILE_MODE)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}

/// Opens a segment for reading only: for its records, and to probe its locks (a probe takes no
/// lock, so needs no write access). Close-on-exec, never through a symbolic link. Anything but
/// a regular file in its place is an error (a folder opens for reading, and would pass for a
/// segment nobody locks).
pub(crate) fn open_to_read(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// Reads into `buf` from `offset` until it is full or the file ends: how many bytes came.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
