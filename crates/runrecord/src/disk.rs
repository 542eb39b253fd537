//! How a run's appended-to files are opened and written: never through a symbolic link, a torn
//! last line cut off before the next append, a new entry made durable.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use crate::names::FILE_MODE;

/// Opens `path` for appending (and reading too, with `read`), creating it with mode 0600 if
/// missing: the way every appended-to file of a run is opened. A symbolic link in its place is
/// an error (`ELOOP`), never followed, so that a link planted there cannot send a run's output
/// or records elsewhere.
///
/// Errors: I/O errors (e.g. the folder does not exist).
pub(crate) fn open_appending(path: &Path, read: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(read)
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Appends `line` to `file` (an overflow file only its run's lock holder writes) after cutting
/// off a torn line a dead writer left, in one positioned write: a reader sees it whole or torn
/// (and skips it), never two records run together. `durable`: then `fdatasync`s it (which
/// covers a file's new size, so an append is durable without the `fsync` of its timestamps).
pub(crate) fn append_line(file: &File, line: &[u8], durable: bool) -> io::Result<()> {
    let end = clean_end(file)?;
    file.write_all_at(line, end)?;
    if durable {
        file.sync_data()?;
    }
    Ok(())
}

/// The length of `file` once a torn last line (no `\n`) is cut off: where the next record
/// goes. Costs an `fstat` and a one-byte read when the file ends whole, as it does but after a
/// crash mid-write.
pub(crate) fn clean_end(file: &File) -> io::Result<u64> {
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
    let keep = crate::records::complete_len(&all) as u64;
    file.set_len(keep)?;
    Ok(keep)
}

/// `e`, its message prefixed with `path`: for an error of a step whose file the caller's own
/// message does not name.
pub(crate) fn naming(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// `unlink`, a missing file being fine.
pub(crate) fn remove_file(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// fsync of a folder, which makes a new entry in it durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
