//! Waiting on a pipe and on blocked signals at once: a `signalfd` for the signals, `poll` over
//! both, and non-blocking reads of the pipe. The shim uses it to drain its command's output
//! while it waits for the command, on its only thread.
//!
//! `signalfd` (Linux) turns the signals a thread has blocked into a readable descriptor: a
//! signal stays pending, and blocked, until it is read, exactly as with `sigtimedwait`, so
//! nothing is lost between two waits. All through nix (signalfd, poll) and rustix (flags).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::signals::{BlockedSignals, Signal};

/// A descriptor that becomes readable when one of a set of blocked signals is pending.
#[derive(Debug)]
pub struct SignalReader {
    fd: SignalFd,
}

impl SignalReader {
    /// A reader for `signals`, which the calling thread has blocked (see
    /// [`super::signals::block`]); close-on-exec and non-blocking.
    ///
    /// Errors: the system is out of descriptors or memory.
    pub fn new(signals: &BlockedSignals) -> io::Result<SignalReader> {
        let fd = SignalFd::with_flags(
            signals.set(),
            SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
        )?;
        Ok(SignalReader { fd })
    }

    /// Consumes one pending signal and returns it; `None` when none is pending.
    pub fn take(&self) -> Option<Signal> {
        match self.fd.read_signal() {
            Ok(Some(info)) => Signal::try_from(info.ssi_signo as i32).ok(),
            _ => None,
        }
    }
}

/// What [`wait_pipe_or_signal`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ready {
    /// The pipe has data, or its writers are all gone (a read then returns end-of-file).
    pub pipe: bool,
    /// A signal is pending ([`SignalReader::take`] returns it).
    pub signal: bool,
}

/// Waits until `pipe` (when given) is readable or hung up, or a signal of `signals` is pending,
/// at most `timeout` (forever if `None`; longer than a day counts as a day, so a caller with a
/// far deadline simply waits again). An interrupted wait returns nothing ready.
///
/// Errors: `poll` failed for another reason than an interruption.
pub fn wait_pipe_or_signal(
    pipe: Option<&OwnedFd>,
    signals: &SignalReader,
    timeout: Option<Duration>,
) -> io::Result<Ready> {
    let timeout = poll_timeout(timeout);
    let mut fds = vec![PollFd::new(signals.fd.as_fd(), PollFlags::POLLIN)];
    if let Some(p) = pipe {
        fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
    }
    match nix::poll::poll(&mut fds, timeout) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(Ready::default()),
        Err(e) => return Err(e.into()),
    }
    let any = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
    Ok(Ready {
        signal: any(&fds[0]),
        pipe: fds.get(1).is_some_and(any),
    })
}

/// Waits until one of `fds` is readable or hung up, at most `timeout` (forever if `None`; as for
/// [`wait_pipe_or_signal`]). Returns, per descriptor in order, whether it is ready; an
/// interrupted wait returns none ready.
///
/// Errors: `poll` failed for another reason than an interruption.
pub fn wait_readable(
    fds: &[std::os::fd::BorrowedFd<'_>],
    timeout: Option<Duration>,
) -> io::Result<Vec<bool>> {
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
        .collect();
    match nix::poll::poll(&mut polled, poll_timeout(timeout)) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(vec![false; fds.len()]),
        Err(e) => return Err(e.into()),
    }
    Ok(polled
        .iter()
        .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
        .collect())
}

/// `timeout` for `poll`: rounded up to the millisecond, so that a deadline 0.4 ms away is not
/// polled with 0 in a busy loop; longer than a day counts as a day; `None` is forever.
fn poll_timeout(timeout: Option<Duration>) -> PollTimeout {
    match timeout {
        None => PollTimeout::NONE,
        Some(d) => {
            let ms = d.as_micros().div_ceil(1000).min(86_400_000);
            PollTimeout::try_from(ms as i32).unwrap_or(PollTimeout::MAX)
        }
    }
}

/// Makes reads of `fd` return at once when nothing is there (`WouldBlock`).
///
/// Errors: `fd` is not open.
pub fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// Reads what `fd` has into `buf`: `Ok(0)` is end-of-file, `WouldBlock` nothing yet (a
/// non-blocking descriptor), `Interrupted` a signal.
///
/// Errors: as read(2).
pub fn read(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::io::read(fd, buf)?)
}
