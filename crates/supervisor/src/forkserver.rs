//! The fork server: a small single-threaded process, forked from `fleet daemon` before its
//! async runtime exists, that forks each run's shim on the daemon's request — so that starting a
//! run costs one fork of a small process instead of an exec of the whole fleet binary.
//!
//! Why. An exec of the fleet binary costs more CPU than a short command itself (the dynamic
//! loader's relocations, the C library's start-up probes; docs/PERFORMANCE.md), and forking the
//! daemon itself is unsafe once it has threads (only the forking thread survives in the child,
//! with whatever locks the others held). The fork server is forked while the daemon still has
//! one thread, holds nothing (no database, no daemon lock, no runtime), and stays that way.
//!
//! Protocol, over a `SOCK_SEQPACKET` socket pair (one message per request or reply):
//!
//! * request: the shim's arguments ([`ShimArgs::to_args`]) and its environment changes
//!   ([`ShimArgs::env`]), length-prefixed, with one descriptor attached (`SCM_RIGHTS`): the write
//!   end of a pipe the daemon reads. It becomes the shim's stdout, so the daemon reads the shim's
//!   `running PID` line from it, and its end-of-file tells the daemon the shim is gone — the
//!   same as for a shim the daemon starts itself.
//! * reply: the shim's pid (8 bytes, native order), or a negative errno if the fork failed.
//!
//! The server ignores SIGCHLD, so the kernel reaps its children (no zombies, no wait loop), and
//! the termination signals, so it lives exactly as long as the daemon: when the daemon's end of
//! the socket closes (exit or crash), the server's next receive reads end-of-file and it exits.
//! Its shims are in their own sessions and outlive both, as shims always do.
//!
//! Failure 1 and the "never starts anything twice" rule: a request whose outcome is unknown (sent,
//! but no reply) may still have forked a shim, so the daemon never starts a second shim for the
//! same claim; it waits for the pipe's end-of-file and lets the run files say what happened
//! ([`crate::fate::settle`]: no `started` record ⇒ tombstone and requeue).

use std::ffi::OsString;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::shim::{self, ShimArgs};

/// The largest request the server accepts, in bytes (argv and environment of one run).
/// Larger ones are refused before anything is sent; the daemon then execs the shim instead.
pub const MAX_REQUEST: usize = 128 * 1024;

/// How long the daemon waits for the fork server's answer, in seconds. A fork takes well under
/// a millisecond; past this the request counts as unanswered ([`ForkServerError::Unknown`]) and
/// the daemon stops using the server.
pub const REPLY_TIMEOUT_SECS: libc::time_t = 5;

/// The daemon's end of a running fork server.
#[derive(Debug)]
pub struct ForkServer {
    socket: OwnedFd,
    pid: i32,
}

/// Why a request to the fork server failed.
#[derive(Debug, thiserror::Error)]
pub enum ForkServerError {
    /// The request is larger than [`MAX_REQUEST`]: nothing was sent, the server is fine, and
    /// this one shim must be started another way.
    #[error("{0}")]
    TooLarge(#[source] io::Error),
    /// Nothing reached the server, so no shim exists: starting the shim another way is safe.
    #[error("the fork server did not take the request: {0}")]
    NotSent(#[source] io::Error),
    /// The request was sent but no pid came back: a shim may exist. Never start another one for
    /// the same claim; wait for the report pipe's end-of-file instead.
    #[error("the fork server took the request but gave no answer: {0}")]
    Unknown(#[source] io::Error),
    /// The server answered that its fork failed: no shim exists.
    #[error("the fork server could not fork: {0}")]
    ForkFailed(#[source] io::Error),
}

impl ForkServer {
    /// Forks the fork server. Call it while the process has exactly one thread — before any
    /// async runtime, logging thread or database pool exists — and before taking the daemon
    /// lock (the server must hold no descriptor but its socket and the standard three).
    ///
    /// Errors: the process already has more than one thread (forking then could leave the
    /// child with a lock some other thread held), or `socketpair`/`fork` failed. The daemon then
    /// execs `fleet shim` for every run instead: slower, the same protocol.
    pub fn start() -> io::Result<ForkServer> {
        let threads = std::fs::read_dir("/proc/self/task")?.count();
        if threads != 1 {
            return Err(io::Error::other(format!(
                "the process already has {threads} threads; a fork server needs one"
            )));
        }
        let mut fds = [0 as RawFd; 2];
        // SAFETY: socketpair writes two descriptors into `fds`.
        if unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let parent = std::process::id() as i32;
        // SAFETY: the process has one thread (checked above), so the child is a consistent copy.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                drop(ours);
                // Die with the daemon even if stopped or stuck (SIGKILL reaches a stopped
                // process; the end-of-file on the socket would not). The forking thread is the
                // daemon's main thread, which lives as long as the daemon.
                // SAFETY: prctl and getppid on this process.
                unsafe {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                    if libc::getppid() != parent {
                        libc::_exit(0);
                    }
                }
                serve(theirs)
            }
            pid => {
                drop(theirs);
                // A fork server that stops answering (stopped, starved) must not freeze the
                // daemon's loop: a reply that takes longer than this counts as no reply.
                let timeout = libc::timeval {
                    tv_sec: REPLY_TIMEOUT_SECS,
                    tv_usec: 0,
                };
                // SAFETY: setting a socket option from a local value of the right type.
                let rc = unsafe {
                    libc::setsockopt(
                        ours.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_RCVTIMEO,
                        (&timeout as *const libc::timeval).cast(),
                        size_of::<libc::timeval>() as libc::socklen_t,
                    )
                };
                if rc != 0 {
                    // Dropping `ours` ends the server.
                    return Err(io::Error::last_os_error());
                }
                Ok(ForkServer { socket: ours, pid })
            }
        }
    }

    /// The server's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Ends a server the daemon gives up on (dead, or stopped or stuck with a request unread):
    /// SIGKILL, so that an unread request — and the report pipe's write end it carries — dies
    /// with it and the pipe reaches end-of-file; then reaps it on a thread of its own, so that no
    /// zombie is left. Safe because the server is the caller's child and not yet reaped: its pid
    /// cannot belong to another process. Call at most once.
    pub fn kill(&self) {
        let pid = self.pid;
        // SAFETY: see above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = std::thread::Builder::new()
            .name("forksrv-reaper".into())
            .spawn(move || {
                // SAFETY: waits for our own child.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            });
    }

    /// Asks the server to fork the shim for `args`, with `report` (the write end of the pipe
    /// the daemon reads) as its stdout. Returns the shim's pid.
    ///
    /// Blocks for one round trip (about as long as a fork of a small process), at most
    /// [`REPLY_TIMEOUT_SECS`]. Errors say whether a shim may exist ([`ForkServerError::Unknown`]:
    /// no answer, or none in time) or surely does not.
    pub fn spawn(&self, args: &ShimArgs, report: OwnedFd) -> Result<i32, ForkServerError> {
        let request = encode(args).map_err(ForkServerError::TooLarge)?;
        send_with_fd(self.socket.as_raw_fd(), &request, report.as_raw_fd())
            .map_err(ForkServerError::NotSent)?;
        // Our copy of the write end must close, or the daemon would never see end-of-file.
        drop(report);
        let mut reply = [0u8; 8];
        let n = loop {
            // SAFETY: reading into a buffer of the given length.
            let n = unsafe {
                libc::recv(
                    self.socket.as_raw_fd(),
                    reply.as_mut_ptr().cast(),
                    reply.len(),
                    0,
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(ForkServerError::Unknown(e));
            }
        };
        if n != reply.len() {
            return Err(ForkServerError::Unknown(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the fork server closed its socket",
            )));
        }
        match i64::from_ne_bytes(reply) {
            pid if pid > 0 => Ok(pid as i32),
            errno => Err(ForkServerError::ForkFailed(io::Error::from_raw_os_error(
                (-errno) as i32,
            ))),
        }
    }
}

/// The server's loop, in the forked child. Never returns.
fn serve(socket: OwnedFd) -> ! {
    // SAFETY: single-threaded; dispositions and descriptors of this process only.
    unsafe {
        // The kernel reaps our children: a shim's exit reaches the daemon as end-of-file.
        libc::signal(libc::SIGCHLD, libc::SIG_IGN);
        // Live as long as the daemon does, not as long as its terminal or its service manager's
        // patience: the daemon's exit closes the socket, and that ends us.
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        let name = c"fleet-forksrv";
        libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0);
    }
    set_command_line(&["fleet-forksrv"]);
    // Keep the socket and the standard three; nothing else the daemon had open may reach a
    // shim (the daemon's own inherited descriptors included).
    let fd = socket.as_raw_fd();
    // SAFETY: as above.
    unsafe {
        if fd != 3 && libc::dup2(fd, 3) != 3 {
            libc::_exit(1);
        }
        if fd < 3 {
            // The daemon was started with a standard descriptor closed: the socket took its
            // number. Let it go; the shims open their own standard descriptors.
            libc::close(fd);
        }
        libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
    }
    std::mem::forget(socket);
    let socket: RawFd = 3;
    // Failpoints (tests only) are read here, once: the shims forked below inherit them, and must
    // not set them up again (that lock is held by this guard, in every copy of this process).
    let _failpoints = crate::failpoints::scenario();
    let mut buf = vec![0u8; MAX_REQUEST];
    loop {
        let (n, report) = match recv_with_fd(socket, &mut buf) {
            Ok(Some(got)) => got,
            // End-of-file: the daemon is gone.
            Ok(None) => unsafe { libc::_exit(0) },
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => unsafe { libc::_exit(1) },
        };
        let reply: i64 = match (decode(&buf[..n]), report) {
            (Some(args), Some(report)) => {
                // SAFETY: this process is single-threaded.
                match unsafe { libc::fork() } {
                    -1 => {
                        -(io::Error::last_os_error()
                            .raw_os_error()
                            .unwrap_or(libc::EAGAIN) as i64)
                    }
                    0 => {
                        let code = shim::main_forked(&args, report);
                        // Never back into the server's loop, never its destructors.
                        // SAFETY: ends this process.
                        unsafe { libc::_exit(code) }
                    }
                    pid => {
                        drop(report);
                        fail::fail_point!("forkserver-after-fork", |_| std::process::abort());
                        pid as i64
                    }
                }
            }
            _ => -(libc::EINVAL as i64),
        };
        let bytes = reply.to_ne_bytes();
        // SAFETY: sending a buffer of the given length. A failed send means the daemon is gone;
        // the next receive sees that.
        unsafe {
            libc::send(
                socket,
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
    }
}

/// Rewrites the command line this process shows in `ps` and /proc/PID/cmdline (for instance
/// `fleet shim --run-id 7`), so that a forked copy of the daemon no longer reads as
/// `fleet … daemon`: an operator's `pkill -f 'fleet.*daemon'` must not reach shims (and, through
/// them, their commands). The new words replace the original ones in place, cut to the space the
/// original command line had; the rest is cleared.
///
/// Call only in a process forked from the daemon that will never read its arguments again.
pub(crate) fn set_command_line(words: &[&str]) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // Fields 48 and 49 of proc(5), counted after the parenthesised command name (field 2).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let (Some(start), Some(end)) = (
        fields.get(45).and_then(|f| f.parse::<usize>().ok()),
        fields.get(46).and_then(|f| f.parse::<usize>().ok()),
    ) else {
        return;
    };
    if end <= start || end - start > 1 << 20 {
        return;
    }
    let mut text: Vec<u8> = words.join("\0").into_bytes();
    text.truncate(end - start - 1);
    text.resize(end - start, 0);
    // SAFETY: [start, end) is this process's own argument area (the kernel's record of where
    // the original argv strings are), writable stack memory that nothing here reads any more.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), start as *mut u8, text.len()) };
}

/// A request's bytes: `u32 count` then `u32 length, bytes` for each shim argument, then the
/// same for the environment as `KEY=VALUE` (set) or `KEY` (remove). Error: too large.
fn encode(args: &ShimArgs) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut list = |items: Vec<Vec<u8>>| {
        out.extend_from_slice(&(items.len() as u32).to_ne_bytes());
        for item in items {
            out.extend_from_slice(&(item.len() as u32).to_ne_bytes());
            out.extend_from_slice(&item);
        }
    };
    list(args.to_args().into_iter().map(OsString::into_vec).collect());
    list(
        args.env
            .iter()
            .map(|(k, v)| {
                let mut item = k.as_bytes().to_vec();
                if let Some(v) = v {
                    item.push(b'=');
                    item.extend_from_slice(v.as_bytes());
                }
                item
            })
            .collect(),
    );
    if out.len() > MAX_REQUEST {
        return Err(io::Error::other(format!(
            "the run's command and environment take {} bytes, above the fork server's {}",
            out.len(),
            MAX_REQUEST
        )));
    }
    Ok(out)
}

/// The inverse of [`encode`]; `None` if the bytes are not a well-formed request.
fn decode(bytes: &[u8]) -> Option<ShimArgs> {
    let mut rest = bytes;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
        rest = tail;
        Some(head)
    };
    let mut list = || -> Option<Vec<Vec<u8>>> {
        let count = u32::from_ne_bytes(take(4)?.try_into().ok()?) as usize;
        let mut items = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let len = u32::from_ne_bytes(take(4)?.try_into().ok()?) as usize;
            items.push(take(len)?.to_vec());
        }
        Some(items)
    };
    let argv = list()?;
    let env = list()?;
    let argv: Vec<OsString> = argv.into_iter().map(OsString::from_vec).collect();
    let mut args = ShimArgs::from_args(&argv).ok()?;
    args.env = env
        .into_iter()
        .map(|item| match item.iter().position(|&b| b == b'=') {
            Some(i) => (
                OsString::from_vec(item[..i].to_vec()),
                Some(OsString::from_vec(item[i + 1..].to_vec())),
            ),
            None => (OsString::from_vec(item), None),
        })
        .collect();
    Some(args)
}

/// Space for one `SCM_RIGHTS` message carrying one descriptor.
const CMSG_BUF: usize = 64;

/// Sends one message with one descriptor attached.
fn send_with_fd(socket: RawFd, data: &[u8], fd: RawFd) -> io::Result<()> {
    let mut control = [0u8; CMSG_BUF];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; every pointer in it refers to a live local buffer, and the
    // CMSG_* helpers stay within `control`, which is large enough for one descriptor.
    unsafe {
        let space = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize;
        assert!(space <= CMSG_BUF);
        let mut msg: libc::msghdr = MaybeUninit::zeroed().assume_init();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        loop {
            let n = libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL);
            if n >= 0 {
                return if n as usize == data.len() {
                    Ok(())
                } else {
                    Err(io::Error::other("short send to the fork server"))
                };
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Receives one message and the descriptor attached to it, if any. `Ok(None)` at end-of-file.
/// A truncated message is an error (`EMSGSIZE`); its descriptor is closed.
fn recv_with_fd(socket: RawFd, buf: &mut [u8]) -> io::Result<Option<(usize, Option<OwnedFd>)>> {
    let mut control = [0u8; CMSG_BUF];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as in `send_with_fd`; descriptors received are owned from here on.
    unsafe {
        let mut msg: libc::msghdr = MaybeUninit::zeroed().assume_init();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_BUF as _;
        let n = libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut fd = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count =
                    ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for i in 0..count {
                    let got = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    // Only the first is expected; any other is closed by its drop.
                    if fd.is_none() {
                        fd = Some(got);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if n == 0 && fd.is_none() {
            return Ok(None);
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        Ok(Some((n as usize, fd)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    fn sample() -> ShimArgs {
        ShimArgs {
            state_dir: PathBuf::from("/var/lib/fleet"),
            run_id: 12,
            token: 99,
            timeout: Some(Duration::from_millis(1500)),
            kill_grace: Duration::from_secs(10),
            cwd: PathBuf::from("/srv"),
            argv: vec!["sh".into(), "-c".into(), "echo a=b".into()],
            env: vec![
                ("FLEET_RUN_ID".into(), Some("12".into())),
                ("EMPTY".into(), Some("".into())),
                ("WITH_EQ".into(), Some("x=y=z".into())),
                ("FLEET_OCCURRENCE".into(), None),
                (
                    OsString::from_vec(vec![b'K', 0xff]),
                    Some(OsString::from_vec(vec![0xfe])),
                ),
            ],
        }
    }

    #[test]
    fn requests_round_trip() {
        let a = sample();
        assert_eq!(decode(&encode(&a).unwrap()), Some(a));
    }

    #[test]
    fn malformed_requests_are_refused_not_panicked_on() {
        let good = encode(&sample()).unwrap();
        for cut in 0..good.len() {
            assert_eq!(decode(&good[..cut]), None, "cut at {cut}");
        }
        assert_eq!(decode(&[0xff; 16]), None);
    }

    #[test]
    fn oversized_requests_are_refused_before_sending() {
        let mut a = sample();
        a.env
            .push(("BIG".into(), Some("x".repeat(MAX_REQUEST).into())));
        assert!(encode(&a).is_err());
    }

    #[test]
    fn a_message_and_its_descriptor_cross_a_socket_pair() {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: socketpair writes two descriptors.
        assert_eq!(
            unsafe {
                libc::socketpair(
                    libc::AF_UNIX,
                    libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                    0,
                    fds.as_mut_ptr(),
                )
            },
            0
        );
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let file = tempfile::tempfile().unwrap();
        send_with_fd(a.as_raw_fd(), b"hello", file.as_raw_fd()).unwrap();
        let mut buf = [0u8; 16];
        let (n, fd) = recv_with_fd(b.as_raw_fd(), &mut buf).unwrap().unwrap();
        assert_eq!(&buf[..n], b"hello");
        let fd = fd.expect("a descriptor");
        assert_ne!(fd.as_raw_fd(), file.as_raw_fd());
        // The same open file: a write through one is seen through the other.
        use std::io::{Read, Seek, Write};
        let mut got = std::fs::File::from(fd);
        (&file).write_all(b"xyz").unwrap();
        got.rewind().unwrap();
        let mut s = String::new();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "xyz");
        // A message too large for the buffer is an error, not a silent truncation.
        send_with_fd(a.as_raw_fd(), &[7u8; 64], file.as_raw_fd()).unwrap();
        assert!(recv_with_fd(b.as_raw_fd(), &mut buf).is_err());
        drop(a);
        assert!(recv_with_fd(b.as_raw_fd(), &mut buf).unwrap().is_none());
    }
}
