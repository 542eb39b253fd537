//! Byte-range locks on a file, of the open file description (OFD) kind: how a run's slot in a
//! shared segment is locked by its shim alone. Through nix's `fcntl`, since rustix locks whole
//! files only; the one `unsafe` block makes the C struct of a request.

use std::fs::File;
use std::io;

/// A byte range of a file, `len` bytes from `start`, as an open-file-description (OFD) lock
/// covers it: one run's slot in a shared segment file ([`crate::slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The first byte, from the start of the file.
    pub start: u64,
    /// How many bytes; never 0 (0 would mean "to the end of the file, however far it grows").
    pub len: u64,
}

/// Takes an exclusive OFD lock on `range` of `file` (`F_OFD_SETLK`, or with `wait`
/// `F_OFD_SETLKW`, waiting as long as another holder keeps it): `Ok(true)` when taken,
/// `Ok(false)` when another open file description holds a lock over part of it (never with
/// `wait`). Like an `flock`, and unlike a classic POSIX lock, the lock belongs to the open file
/// description: the kernel drops it when its last descriptor closes — when its holder dies —
/// and closing some other descriptor of the same file does not drop it. `file` must be open for
/// writing. Retries on EINTR.
///
/// Errors: the system refused for another reason (`EINVAL` for a range past the largest file
/// offset; `ENOLCK` when the kernel is out of lock records).
pub fn lock_range(file: &File, range: Range, wait: bool) -> io::Result<bool> {
    let lock = ofd_flock(libc::F_WRLCK, range)?;
    loop {
        let arg = if wait {
            nix::fcntl::FcntlArg::F_OFD_SETLKW(&lock)
        } else {
            nix::fcntl::FcntlArg::F_OFD_SETLK(&lock)
        };
        match nix::fcntl::fcntl(file, arg) {
            Ok(_) => return Ok(true),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) if !wait => {
                return Ok(false)
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Releases the OFD lock this open file description holds on `range` (nothing happens if it
/// holds none).
///
/// Errors: the system refused.
pub fn unlock_range(file: &File, range: Range) -> io::Result<()> {
    let lock = ofd_flock(libc::F_UNLCK, range)?;
    nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_OFD_SETLK(&lock))?;
    Ok(())
}

/// The first range within `range` that another open file description holds an OFD lock on
/// (`F_OFD_GETLK`, which takes no lock: a probe that keeps nobody out), or `None` when no one
/// does. A holder that died holds nothing: the kernel drops its locks as its descriptors close,
/// at exit, before the parent reaps. Locks of `file`'s own open file description never count.
///
/// Errors: the system refused.
pub fn held_range(file: &File, range: Range) -> io::Result<Option<Range>> {
    let mut lock = ofd_flock(libc::F_WRLCK, range)?;
    nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_OFD_GETLK(&mut lock))?;
    if i32::from(lock.l_type) == libc::F_UNLCK {
        return Ok(None);
    }
    let start = u64::try_from(lock.l_start).unwrap_or(0);
    // A length of 0 reaches to the end of any file: report it up to the end of `range`.
    let end = range.start + range.len;
    let len = match u64::try_from(lock.l_len) {
        Ok(0) | Err(_) => end.saturating_sub(start),
        Ok(n) => n,
    };
    Ok(Some(Range { start, len }))
}

/// The `flock` record of an OFD lock request of `kind` over `range` (`l_pid` must be 0).
fn ofd_flock(kind: i32, range: Range) -> io::Result<libc::flock> {
    let start = libc::off_t::try_from(range.start)
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let len = libc::off_t::try_from(range.len)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `flock` is a plain C struct of integers, for which all zeroes is a valid value
    // (and the required 0 for `l_pid` of an OFD lock).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start;
    lock.l_len = len;
    Ok(lock)
}
