//! Descriptors: `flock` locks, close-on-exec pipes, the standard streams, closing what a
//! process inherited, and whether this process may use a file (access(2)). (The byte-range
//! locks on a run's record slot are the run records' own: `runrecord::ofd`.)
//!
//! Locks, pipes and the standard streams go through rustix, `poll` through nix; closing every
//! descriptor above a number (`close_range`, or a walk of `/proc/self/fd` where the kernel lacks
//! it) and moving a descriptor to a given number are raw libc calls, offered by neither crate.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;

use rustix::fs::FlockOperation;
use rustix::pipe::PipeFlags;

/// Takes an exclusive `flock` on `file`, waiting as long as another open file description holds
/// it. The lock lasts until [`unlock`] or until every descriptor of this open file description
/// is closed — the kernel drops it when its holder dies. Retries on EINTR.
///
/// Errors: the system refused (e.g. `file` is not open for a lock).
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    flock(file, FlockOperation::LockExclusive)
}

/// Takes an exclusive `flock` on `file` without waiting: `Ok(true)` when taken, `Ok(false)` when
/// another open file description holds it.
///
/// Errors: the system refused for another reason.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether another open file description holds an exclusive `flock` on `file`: a probe that
/// takes no exclusive lock. It takes a *shared* lock without waiting and releases it at once, so
/// it never keeps out a reader, and keeps out for that instant only another process's
/// non-blocking exclusive attempt (which must then look again, as a daemon starting does). A
/// holder that died, zombies included, holds nothing: the kernel drops an `flock` when its last
/// descriptor closes, at exit, before the parent reaps.
///
/// Errors: the system refused for another reason than the lock being held.
pub fn is_locked_exclusively(file: &File) -> io::Result<bool> {
    match flock(file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            unlock(file)?;
            Ok(false)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(true),
        Err(e) => Err(e),
    }
}

/// Whether this process may read `path` (and, with `write`, also write it), judged by the
/// kernel for its real user and groups (access(2)): `Ok(())`, or the reason it may not —
/// `PermissionDenied` for a file or a folder on its way that this user may not use, `NotFound`
/// when it does not exist. Opens nothing: a probe that opened a SQLite database and closed it
/// would drop the POSIX locks this process's own connections hold on it.
///
/// Errors: as said; and the system's own errors (a name too long, a loop of links).
pub fn may_access(path: &std::path::Path, write: bool) -> io::Result<()> {
    let mut mode = rustix::fs::Access::READ_OK;
    if write {
        mode |= rustix::fs::Access::WRITE_OK;
    }
    rustix::fs::access(path, mode)?;
    Ok(())
}

/// Opens `path` for reading and writing, creating it (with `mode`, never through a symbolic
/// link left in its place) when missing. A file this call creates is handed to the owner of the
/// folder it is in ([`give_to_folder_owner`]): fleet run as root in a state directory that is
/// another user's (the package's `/var/lib/fleet`, the `fleet` user's) must not leave there a
/// file the daemon, running as that user, can no longer open. A file that was there already is
/// opened as it is: fleet changes nothing of what it did not create.
///
/// Errors: opening or creating it; handing it over (the new file is removed again then).
pub fn open_or_create(path: &Path, mode: u32) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |create: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(create)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    };
    match open(true) {
        Ok(file) => {
            if let Err(e) = give_to_folder_owner(&file, path) {
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
            Ok(file)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => open(false),
        Err(e) => Err(e),
    }
}

/// Gives `file`, which this process has just created at `path`, to the user and group that own
/// the folder `path` is in, when this process runs as root and that folder is another user's
/// (fchown). Nothing otherwise: a user who is not root creates only files of its own, which is
/// what they are then. Call it on files fleet creates, never on others.
///
/// Errors: the folder cannot be looked at, or the system refused the change of owner.
pub fn give_to_folder_owner(file: &File, path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let owner = std::fs::metadata(folder)?;
    if owner.uid() == 0 {
        return Ok(());
    }
    rustix::fs::fchown(
        file,
        Some(rustix::fs::Uid::from_raw(owner.uid())),
        Some(rustix::fs::Gid::from_raw(owner.gid())),
    )?;
    Ok(())
}

/// For an error `error` about `path`: when it is "permission denied" and the file is another
/// user's, whose it is and how to give it to this process's user, to append to the message,
/// e.g. ` (it belongs to root:root, and fleet runs as fleet here: as root, chown fleet:fleet
/// /var/lib/fleet/fleet.db)`. Empty otherwise (or when the file cannot be looked at).
pub fn whose(path: &Path, error: &io::Error) -> String {
    use std::os::unix::fs::MetadataExt;
    if error.kind() != io::ErrorKind::PermissionDenied {
        return String::new();
    }
    let Ok(meta) = std::fs::metadata(path) else {
        return String::new();
    };
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    if meta.uid() == uid {
        return String::new();
    }
    let user = |uid: u32| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| uid.to_string())
    };
    let group = |gid: u32| {
        nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
            .ok()
            .flatten()
            .map(|g| g.name)
            .unwrap_or_else(|| gid.to_string())
    };
    format!(
        " (it belongs to {}:{}, and fleet runs as {} here: as root, chown {}:{} {})",
        user(meta.uid()),
        group(meta.gid()),
        user(uid),
        user(uid),
        group(gid),
        path.display()
    )
}

/// Releases a `flock` this open file description holds (nothing happens if it holds none).
///
/// Errors: the system refused.
pub fn unlock(file: &File) -> io::Result<()> {
    flock(file, FlockOperation::Unlock)
}

fn flock(file: &File, operation: FlockOperation) -> io::Result<()> {
    loop {
        match rustix::fs::flock(file, operation) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// A pipe whose two ends are close-on-exec: (read end, write end).
///
/// Errors: the system is out of descriptors or memory.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?)
}

/// Whether nobody will ever read what is written to `fd` any more: the write end of a pipe whose
/// readers have all closed it (or a socket or terminal that hung up), which `poll` reports
/// without any write. Lets a command that has nothing to write for a while (`fleet logs
/// --follow`) notice that its reader left. Does not block; `false` for a file, for a reader
/// still there, or when `poll` fails.
pub fn reader_gone(fd: impl AsFd) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    // No event asked for: POLLERR and POLLHUP are reported regardless.
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::empty())];
    match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) if n > 0 => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP)),
        _ => false,
    }
}

/// The device and inode number of what `fd` is open on (fstat(2)): a file's identity, e.g. to
/// tell whether standard error is the stream `JOURNAL_STREAM` (`DEVICE:INODE`) names.
///
/// Errors: `fd` is not open.
pub fn identity(fd: impl AsFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// Lets `fd` survive an `exec` (clears FD_CLOEXEC): how the fork server's socket reaches the
/// fork server's own program. Async-signal-safe.
///
/// Errors: `fd` is not open.
pub fn keep_across_exec(fd: impl AsFd) -> io::Result<()> {
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
    Ok(())
}

/// Makes an `exec` close `fd` (sets FD_CLOEXEC): for a descriptor moved to a fixed number with
/// `dup2`, which clears the flag. Async-signal-safe.
///
/// Errors: `fd` is not open.
pub fn close_on_exec(fd: impl AsFd) -> io::Result<()> {
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
    Ok(())
}

/// Takes descriptor `fd`, inherited through an `exec`, if it is open on a socket.
///
/// Errors: `fd` is not open, or is not a socket (a program meant to be started by another
/// program, run by hand instead).
///
/// # Safety
///
/// Nothing else in this process owns descriptor `fd` (it was inherited, and nothing has taken
/// it yet).
pub unsafe fn take_inherited_socket(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fstat only reads the descriptor's metadata, and fails cleanly on a closed one.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::other(format!("descriptor {fd} is not a socket")));
    }
    // SAFETY: open (fstat succeeded) and owned by nothing else (the caller's guarantee).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether `fd` is closed by an `exec` (FD_CLOEXEC).
///
/// Errors: `fd` is not open.
#[cfg(test)]
pub(crate) fn is_close_on_exec(fd: impl AsFd) -> io::Result<bool> {
    Ok(rustix::io::fcntl_getfd(fd)?.contains(rustix::io::FdFlags::CLOEXEC))
}

/// Makes `fd` this process's standard input: a duplicate on descriptor 0, after which `fd`'s own
/// number is closed; if `fd` already is descriptor 0 it simply stays open as standard input.
/// Async-signal-safe.
///
/// Errors: the system refused (standard input is unchanged, and `fd` is closed).
pub fn set_stdin(fd: OwnedFd) -> io::Result<()> {
    if fd.as_raw_fd() == 0 {
        // Already in place: keep it open, now owned as standard input.
        let _ = fd.into_raw_fd();
        return Ok(());
    }
    rustix::stdio::dup2_stdin(&fd)?;
    Ok(())
}

/// Makes `fd` this process's standard output: a duplicate on descriptor 1, after which `fd`'s
/// own number is closed; if `fd` already is descriptor 1 it simply stays open as standard
/// output. Async-signal-safe.
///
/// Errors: the system refused (standard output is unchanged, and `fd` is closed).
pub fn set_stdout(fd: OwnedFd) -> io::Result<()> {
    if fd.as_raw_fd() == 1 {
        // Already in place: keep it open, now owned as standard output.
        let _ = fd.into_raw_fd();
        return Ok(());
    }
    rustix::stdio::dup2_stdout(&fd)?;
    Ok(())
}

/// Closes every descriptor numbered `first` or above: `close_range(2)`, or on kernels without it
/// (before 5.9) each descriptor `/proc/self/fd` lists.
///
/// Errors: neither way worked (the descriptors stay open).
///
/// # Safety
///
/// Nothing in this process may own a descriptor numbered `first` or above (a `File`, an
/// `OwnedFd`, a socket, the standard library's internals) and use or close it afterwards: it
/// would then act on a closed descriptor, or on an unrelated one that reused the number. Call
/// it where the process has opened nothing of its own yet, to drop what it inherited.
pub unsafe fn close_from(first: u32) -> io::Result<()> {
    // SAFETY: the caller guarantees that nothing uses the descriptors closed here.
    if unsafe { close_range(first) }.is_ok() {
        return Ok(());
    }
    let open: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&fd: &RawFd| fd >= 0 && fd as u32 >= first)
        .collect();
    for fd in open {
        // SAFETY: as above. The directory's own descriptor is among them and already closed:
        // EBADF is harmless.
        unsafe { libc::close(fd) };
    }
    Ok(())
}

/// `close_range(first, ~0, 0)`.
///
/// # Safety
///
/// As for [`close_from`].
unsafe fn close_range(first: u32) -> io::Result<()> {
    // SAFETY: a plain system call on descriptor numbers; the caller guarantees that nothing
    // uses the descriptors it closes.
    if unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Leaves this process with only the standard three descriptors and `fd`, which moves to
/// descriptor 3 (returned). Everything above 3 is closed with `close_range(2)` where the kernel
/// has it (older kernels keep them: callers close again where it matters).
///
/// Errors: `fd` could not be moved to 3 (nothing else was closed).
///
/// # Safety
///
/// As for [`close_from`] with `first` = 3: nothing else in this process may own a descriptor
/// above the standard three and use it afterwards.
pub unsafe fn keep_only_stdio_and(fd: OwnedFd) -> io::Result<OwnedFd> {
    let raw = fd.as_raw_fd();
    if raw != 3 {
        // SAFETY: dup2 onto 3, which nothing in this process owns (the caller's guarantee);
        // `raw` is open for as long as `fd` lives.
        if unsafe { libc::dup2(raw, 3) } != 3 {
            return Err(io::Error::last_os_error());
        }
        // The original number goes (below 3: a standard descriptor the daemon started without,
        // which the socket had taken; the shims open their own standard descriptors).
        drop(fd);
    } else {
        let _ = fd.into_raw_fd();
    }
    // SAFETY: the caller's guarantee; 3 is kept.
    let _ = unsafe { close_range(4) };
    // SAFETY: descriptor 3 is open (moved there above) and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(3) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_are_exclusive_between_open_file_descriptions() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let a = File::open(tmp.path()).unwrap();
        let b = File::open(tmp.path()).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap());
        unlock(&a).unwrap();
        assert!(try_lock_exclusive(&b).unwrap());
        drop(b);
        lock_exclusive(&a).unwrap();
    }

    #[test]
    fn an_exclusive_lock_is_seen_without_being_taken() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let holder = File::open(tmp.path()).unwrap();
        let probe = File::open(tmp.path()).unwrap();
        assert!(!is_locked_exclusively(&probe).unwrap());
        // The probe left nothing behind: the lock is still free for anyone.
        assert!(try_lock_exclusive(&holder).unwrap());
        assert!(is_locked_exclusively(&probe).unwrap());
        drop(holder);
        assert!(!is_locked_exclusively(&probe).unwrap());
    }

    #[test]
    fn access_tells_missing_from_present() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        may_access(tmp.path(), true).unwrap();
        let missing = tmp.path().with_extension("missing");
        let e = may_access(&missing, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn pipe_ends_are_close_on_exec() {
        let (r, w) = pipe().unwrap();
        assert!(is_close_on_exec(&r).unwrap());
        assert!(is_close_on_exec(&w).unwrap());
    }
}
