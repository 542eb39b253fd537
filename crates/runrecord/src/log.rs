//! A run's log with a size bound (`max_log_size`): the shim reads the command's output from a
//! pipe and appends it here ([`BoundedLog`]); once the log would pass the bound, the oldest output is dropped
//! and one marker line, first in the file, says how many bytes were dropped in all.
//!
//! Layout of a compacted log: the marker line ([`marker_line`]), then the newest output (the tail: what operators
//! need after a failure). At every instant the file holds at most `max` bytes of output plus the
//! marker line.
//!
//! Compaction writes the marker and the kept tail to a side file (the log's name and
//! `.compacting`) and renames it over the log: a shim killed at any point leaves either the old
//! log or the new one, both readable (a leftover side file is overwritten by the next
//! compaction and removed with the run's other files). Each compaction keeps half the bound, so
//! the copying costs at most one extra write of every byte the command writes (amortized), and
//! a log under the bound is never copied.
//!
//! The log file is made when the first output arrives: a command that writes nothing leaves no
//! log (one file fewer to create per run; readers take a missing log for an empty one).
//!
//! Readers that follow the log (`fleet logs --follow`) use [`parse_marker`]: the dropped count
//! tells them where in the command's whole output the file now starts, so they neither repeat
//! nor miss what the file still holds after a compaction replaced it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use crate::disk::open_appending;
use crate::files::RunFiles;
use crate::names::FILE_MODE;

/// The smallest `max_log_size` accepted (bytes): below this a compaction would run every few
/// lines.
pub const MIN_MAX_LOG_SIZE: u64 = 1024;

const MARKER_PREFIX: &str = "--- fleet: ";
const MARKER_SUFFIX: &str = " bytes dropped here to keep this log under max_log_size ---\n";

/// The marker line for `dropped` bytes, newline included.
pub fn marker_line(dropped: u64) -> String {
    format!("{MARKER_PREFIX}{dropped}{MARKER_SUFFIX}")
}

/// The longest marker line (a `u64` count); a reader that looks for the marker reads this many
/// bytes from the start of the log.
pub const MARKER_MAX_LEN: usize = MARKER_PREFIX.len() + 20 + MARKER_SUFFIX.len();

/// The most bytes a marker may say were dropped (2^62): far past what any log writes, and
/// small enough that positions in the whole output (dropped plus what the file holds) never
/// overflow.
const MAX_DROPPED: u64 = 1 << 62;

/// If `start` (the first bytes of a log) begins with a marker line: its length in bytes and the
/// number of bytes it says were dropped. `None` for a log that was never compacted.
pub fn parse_marker(start: &[u8]) -> Option<(usize, u64)> {
    let rest = start.strip_prefix(MARKER_PREFIX.as_bytes())?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 20 {
        return None;
    }
    let dropped: u64 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    // No log ever dropped that much (4 EiB): such a line is the command's own output that
    // looks like a marker, and taken for one, positions past it would overflow.
    if dropped > MAX_DROPPED {
        return None;
    }
    rest[digits..].strip_prefix(MARKER_SUFFIX.as_bytes())?;
    Some((MARKER_PREFIX.len() + digits + MARKER_SUFFIX.len(), dropped))
}

/// A run's log opened for bounded appending (see the module documentation).
#[derive(Debug)]
pub struct BoundedLog {
    path: PathBuf,
    side: PathBuf,
    file: File,
    /// Bytes of output in the file (after the marker, if any).
    held: u64,
    /// Length of the marker line at the top of the file; 0 when there is none.
    marker_len: u64,
    /// Bytes dropped so far (what the marker says).
    dropped: u64,
    /// The bound on `held`.
    max: u64,
}

impl BoundedLog {
    /// Opens (or creates, mode 0600) the log of `dir` for appending at most `max` bytes of
    /// output. A log left by an earlier claim of the run is continued: its marker, if any, is
    /// read back, and its output counts against the bound.
    ///
    /// Errors: I/O errors (e.g. `runs/` does not exist).
    pub fn open(dir: &RunFiles, max: u64) -> io::Result<BoundedLog> {
        let path = dir.log_path();
        let mut file = open_appending(&path, true)?;
        let len = file.metadata()?.len();
        let (marker_len, dropped) = read_marker(&mut file)?;
        Ok(BoundedLog {
            side: RunFiles::compacting_path(&path),
            path,
            file,
            held: len - marker_len,
            marker_len,
            dropped,
            max: max.max(MIN_MAX_LOG_SIZE),
        })
    }

    /// Appends `chunk`, compacting first when it would take the log past the bound. Never
    /// blocks on anything but the disk.
    ///
    /// Errors: I/O errors writing the log or the side file; the log is then as it was, or as
    /// the compaction left it (both readable).
    pub fn append(&mut self, chunk: &[u8]) -> io::Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        if self.held + chunk.len() as u64 <= self.max {
            self.file.write_all(chunk)?;
            self.held += chunk.len() as u64;
            return Ok(());
        }
        self.compact_with(chunk)
    }

    /// Bytes dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Replaces the log with: marker, the newest `max / 2` bytes of (log output ++ `chunk`),
    /// started at a line boundary when one is near.
    fn compact_with(&mut self, chunk: &[u8]) -> io::Result<()> {
        let keep = (self.max / 2).max(1) as usize;
        let mut tail: Vec<u8> = Vec::with_capacity(keep);
        let chunk_len = chunk.len() as u64;
        if chunk.len() < keep {
            let from_file = (keep - chunk.len()).min(self.held as usize);
            let mut old = vec![0u8; from_file];
            self.file.seek(SeekFrom::End(-(from_file as i64)))?;
            self.file.read_exact(&mut old)?;
            tail.extend_from_slice(&old);
            tail.extend_from_slice(chunk);
        } else {
            tail.extend_from_slice(&chunk[chunk.len() - keep..]);
        }
        // Start at a line boundary if one is within the first 4 KiB: a cut line helps nobody.
        // Else at least not inside a UTF-8 character: its leading continuation bytes (at most
        // three) are dropped with the rest, and counted, rather than left for a reader to skip.
        let window = tail.len().min(4096);
        let cut = tail[..window].iter().position(|&b| b == b'\n').map_or_else(
            || {
                tail.iter()
                    .take(3)
                    .take_while(|&&b| b & 0xC0 == 0x80)
                    .count()
            },
            |i| i + 1,
        );
        let kept = &tail[cut..];
        let dropped = self.dropped + self.held + chunk_len - kept.len() as u64;
        let marker = marker_line(dropped);

        let mut side = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.side)?;
        side.write_all(marker.as_bytes())?;
        side.write_all(kept)?;
        // Atomic for every reader: the old log or the new one, never a mix.
        fs::rename(&self.side, &self.path)?;
        // The side file's descriptor now is the log's; appends go to its end.
        let reopened = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)?;
        drop(side);
        self.file = reopened;
        self.marker_len = marker.len() as u64;
        self.held = kept.len() as u64;
        self.dropped = dropped;
        Ok(())
    }

    /// Bytes in the file now: marker and output.
    pub fn file_len(&self) -> u64 {
        self.marker_len + self.held
    }
}

/// The marker at the start of `file`, as (its length, bytes dropped); (0, 0) when none.
fn read_marker(file: &mut File) -> io::Result<(u64, u64)> {
    let mut start = [0u8; MARKER_MAX_LEN];
    file.seek(SeekFrom::Start(0))?;
    let mut n = 0;
    while n < start.len() {
        match file.read(&mut start[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(parse_marker(&start[..n]).map_or((0, 0), |(len, d)| (len as u64, d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_in(dir: &tempfile::TempDir, max: u64) -> (RunFiles, BoundedLog) {
        let run = RunFiles::new(dir.path(), 1);
        run.create_runs_dir().unwrap();
        let log = BoundedLog::open(&run, max).unwrap();
        (run, log)
    }

    #[test]
    fn the_marker_round_trips_and_nothing_else_parses() {
        let m = marker_line(123_456);
        assert_eq!(parse_marker(m.as_bytes()), Some((m.len(), 123_456)));
        let mut more = m.clone().into_bytes();
        more.extend_from_slice(b"output\n");
        assert_eq!(parse_marker(&more), Some((m.len(), 123_456)));
        assert_eq!(parse_marker(b"--- fleet:  bytes dropped"), None);
        assert_eq!(parse_marker(b"hello\n"), None);
        assert!(marker_line(u64::MAX).len() <= MARKER_MAX_LEN);
        // A count no log reaches is the command's own output, not a marker.
        let most = marker_line(MAX_DROPPED);
        assert_eq!(
            parse_marker(most.as_bytes()),
            Some((most.len(), MAX_DROPPED))
        );
        assert_eq!(parse_marker(marker_line(MAX_DROPPED + 1).as_bytes()), None);
        assert_eq!(parse_marker(marker_line(u64::MAX).as_bytes()), None);
    }

    /// Output with no line break to cut at: the kept output starts on a character boundary,
    /// and the continuation bytes cut off are counted as dropped.
    #[test]
    fn a_cut_with_no_line_break_starts_on_a_character() {
        let dir = tempfile::tempdir().unwrap();
        let (run, mut log) = log_in(&dir, 1024);
        let mut written = 0u64;
        for _ in 0..60 {
            let chunk = "€".repeat(101);
            log.append(chunk.as_bytes()).unwrap();
            written += chunk.len() as u64;
            let text = fs::read(run.log_path()).unwrap();
            let (mlen, dropped) = parse_marker(&text).unwrap_or((0, 0));
            assert!(
                std::str::from_utf8(&text[mlen..]).is_ok(),
                "{:?}",
                &text[mlen..mlen + 4]
            );
            assert_eq!(dropped + (text.len() - mlen) as u64, written);
        }
    }

    /// Ten times the bound, in lines: the file never passes bound + marker, keeps the newest
    /// output, and the marker counts exactly what is gone.
    #[test]
    fn the_log_stays_under_its_bound_and_keeps_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let max = 4096;
        let (run, mut log) = log_in(&dir, max);
        let mut written = 0u64;
        for i in 0..1000 {
            let line = format!("line {i:05}\n");
            log.append(line.as_bytes()).unwrap();
            written += line.len() as u64;
            let on_disk = fs::metadata(run.log_path()).unwrap().len();
            assert!(
                on_disk <= max + MARKER_MAX_LEN as u64,
                "{on_disk} after {i}"
            );
            assert_eq!(on_disk, log.file_len());
        }
        let text = fs::read(run.log_path()).unwrap();
        let (mlen, dropped) = parse_marker(&text).expect("a marker");
        assert_eq!(dropped + (text.len() - mlen) as u64, written);
        assert!(text.ends_with(b"line 00999\n"));
        assert!(text[mlen..].starts_with(b"line "), "cut at a line boundary");
    }

    /// One chunk larger than the bound, and a log reopened by a later claim, which continues
    /// the count.
    #[test]
    fn a_huge_chunk_and_a_reopened_log_keep_counting() {
        let dir = tempfile::tempdir().unwrap();
        let (run, mut log) = log_in(&dir, 2048);
        log.append(&[b'x'; 10_000]).unwrap();
        let first = log.dropped();
        assert_eq!(first, 10_000 - 1024);
        drop(log);
        let mut again = BoundedLog::open(&run, 2048).unwrap();
        assert_eq!(again.dropped(), first);
        again.append(&[b'y'; 5000]).unwrap();
        let text = fs::read(run.log_path()).unwrap();
        let (mlen, dropped) = parse_marker(&text).unwrap();
        assert_eq!(dropped + (text.len() - mlen) as u64, 15_000);
        assert!(text.ends_with(b"yyyy"));
    }
}
