//! Signal masks, dispositions, and waiting for a signal synchronously.
//!
//! Sets and masks go through `nix`; dispositions and `sigtimedwait` are raw libc calls (rustix
//! leaves signals to the C library, and nix offers neither a timed wait nor a safe way to set a
//! disposition). Every function here is async-signal-safe unless its documentation says
//! otherwise: they are system calls or the C library's async-signal-safe functions, and none
//! allocates.

use std::io;
use std::time::Duration;

use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow};

/// A signal, by name (`Signal::SIGTERM`). The numbers are the platform's.
pub use nix::sys::signal::Signal;

/// A set of signals this thread has blocked, to be consumed with [`BlockedSignals::wait`].
#[derive(Debug, Clone, Copy)]
pub struct BlockedSignals {
    set: SigSet,
}

/// Blocks `signals` (adds them to the signal mask) and returns them as a set to wait on. A
/// blocked signal stays pending until it is waited for, so none is lost however late the wait.
///
/// The mask belongs to the calling thread: call it on the process's only thread if the signals
/// must not be delivered anywhere else.
///
/// Errors: the system refused the mask (the mask is unchanged).
pub fn block(signals: &[Signal]) -> io::Result<BlockedSignals> {
    let mut set = SigSet::empty();
    for &signal in signals {
        set.add(signal);
    }
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
    Ok(BlockedSignals { set })
}

impl BlockedSignals {
    /// The set, for a `signalfd` over it ([`super::readiness::SignalReader`]).
    pub(super) fn set(&self) -> &SigSet {
        &self.set
    }

    /// Waits for one of the blocked signals, at most `timeout` (forever if `None`; longer than a
    /// day counts as a day, so a caller with a far deadline simply waits again). Consumes the
    /// signal and returns it; `None` when the time ran out or the wait was interrupted.
    pub fn wait(&self, timeout: Option<Duration>) -> Option<Signal> {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs().min(86_400) as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `self.set` is an initialised signal set and `ts_ptr` is null or points to `ts`,
        // which lives until the call returns; a null siginfo pointer is allowed.
        let r = unsafe { libc::sigtimedwait(self.set.as_ref(), std::ptr::null_mut(), ts_ptr) };
        // -1 is EAGAIN (timeout) or EINTR: both mean "look again".
        if r > 0 {
            Signal::try_from(r).ok()
        } else {
            None
        }
    }
}

/// Unblocks every signal (an empty signal mask for the calling thread). The mask survives
/// `exec`, so a child that must start with a clean mask calls this before it.
///
/// Async-signal-safe. Errors: the system refused (the mask is unchanged).
pub fn unblock_all() -> io::Result<()> {
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(())
}

/// Sets `signals` to be ignored (process-wide). SIGKILL and SIGSTOP, which cannot be ignored,
/// are skipped. Async-signal-safe.
pub fn ignore(signals: &[Signal]) {
    for &signal in signals {
        set_disposition(signal, libc::SIG_IGN);
    }
}

/// `signal(2)` with "ignore" or "default": the only dispositions this layer sets. It cannot fail
/// for a valid signal other than SIGKILL and SIGSTOP, which are left alone.
fn set_disposition(signal: Signal, disposition: libc::sighandler_t) {
    if matches!(signal, Signal::SIGKILL | Signal::SIGSTOP) {
        return;
    }
    // SAFETY: `disposition` is SIG_IGN or SIG_DFL, so no code of ours is installed to run in
    // signal context; signal(2) only changes the process's disposition of a valid signal.
    unsafe { libc::signal(signal as libc::c_int, disposition) };
}

/// Sets every signal's disposition but SIGKILL's and SIGSTOP's to the default, from 1 to
/// SIGRTMAX: the standard signals, the real-time signals the C library reserves for itself (32
/// and 33 on Linux), and the real-time signals SIGRTMIN..=SIGRTMAX. An "ignore" of any of them,
/// inherited from whoever started the daemon, would otherwise reach every command (ignored
/// dispositions survive `exec`). The C library's reserved two are set with the raw system call,
/// since the C library refuses to touch them; the callers make no use of them (they are
/// single-threaded and never cancel a thread or change their ids).
///
/// Async-signal-safe (only `sigaction`/`rt_sigaction`; SIGRTMAX reads a value the C library
/// fixed at startup), so usable between fork and exec.
pub fn restore_all_defaults() {
    for sig in 1..=libc::SIGRTMAX() {
        restore_default(sig);
    }
}

/// Sets the disposition of each of `signals` (numbers, as [`altered`] lists them) to the
/// default: [`restore_all_defaults`] for a process that knows which ones differ. SIGKILL and
/// SIGSTOP are skipped. Async-signal-safe.
pub fn restore_defaults(signals: &[i32]) {
    for &sig in signals {
        restore_default(sig);
    }
}

/// One signal's disposition back to the default (see [`restore_all_defaults`] for the C
/// library's reserved ones, which take the raw system call). Async-signal-safe.
fn restore_default(sig: i32) {
    if sig == libc::SIGKILL || sig == libc::SIGSTOP {
        return;
    }
    // SAFETY: SIG_DFL installs no handler; `sig` is a signal number the caller took from
    // 1..=SIGRTMAX.
    if unsafe { libc::signal(sig, libc::SIG_DFL) } == libc::SIG_ERR {
        // The kernel's sigaction: handler, flags, restorer, mask — all zero is "default,
        // no flags" whatever the architecture's exact layout.
        let default = [0u64; 4];
        // SAFETY: rt_sigaction reads a kernel sigaction from `default`, which is large enough
        // for it (32 bytes: handler, flags, restorer, an 8-byte mask) and lives across the
        // call; the old action is not asked for (null); 8 is the kernel's mask size on Linux.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                default.as_ptr(),
                std::ptr::null_mut::<libc::c_void>(),
                8usize,
            )
        };
    }
}

/// The signals, 1 to SIGRTMAX, whose disposition in this process is not the default (ignored,
/// or a handler): what [`restore_defaults`] must undo in a forked copy of it for every
/// disposition to be the default, as after [`restore_all_defaults`]. A signal whose disposition
/// cannot be read is listed too. Allocates: call it once, outside any forked child.
pub fn altered() -> Vec<i32> {
    (1..=libc::SIGRTMAX())
        .filter(|&sig| sig != libc::SIGKILL && sig != libc::SIGSTOP)
        .filter(|&sig| {
            // The kernel's sigaction, as in `restore_default`; the handler comes first.
            let mut old = [0u64; 4];
            // SAFETY: rt_sigaction with no new action only writes the current one into `old`,
            // 32 bytes that live across the call (handler, flags, restorer, 8-byte mask).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    std::ptr::null::<libc::c_void>(),
                    old.as_mut_ptr(),
                    8usize,
                )
            };
            r != 0 || old[0] != libc::SIG_DFL as u64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blocked signal raised on this thread waits for `wait`, which consumes it. Raised on
    /// the calling thread only (the test harness's other threads must not see it).
    #[test]
    fn a_blocked_signal_is_waited_for_not_delivered() {
        let blocked = block(&[Signal::SIGUSR1]).unwrap();
        assert_eq!(blocked.wait(Some(Duration::from_millis(1))), None);
        nix::sys::signal::raise(Signal::SIGUSR1).unwrap();
        assert_eq!(
            blocked.wait(Some(Duration::from_secs(5))),
            Some(Signal::SIGUSR1)
        );
        assert_eq!(blocked.wait(Some(Duration::ZERO)), None, "consumed");
    }
}
