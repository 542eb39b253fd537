//! The shim: a tiny per-run monitor (`fleet shim ARGS...`, hidden) that owns one run's command,
//! outlives a daemon crash, and records the command's exit status in the run's files.
//!
//! The daemon starts the shim in its own session with stdout a pipe to the daemon, stderr
//! inherited, and the command's environment already set — by an exec of `fleet shim` ([`main`])
//! or through the [`forkserver`] (`forked::main_forked`). The shim:
//!
//! 1. blocks SIGCHLD, SIGTERM, SIGINT and SIGHUP before anything else, so that none is lost
//!    (they are consumed synchronously with `sigtimedwait`; no handlers, no threads);
//! 2. takes the run's lock (an exclusive OFD lock on its record slot, held for life: the kernel
//!    drops it when the shim dies, so a free lock proves the shim gone);
//! 3. checks the tombstones right after locking: recovery may have given the claim up while this
//!    shim was late, and then the command must not start;
//! 4. appends `started` to the run's record slot before spawning, so "never started" can be
//!    proven (a record that cannot be written, on a full disk say, is retried with backoff
//!    while the lock is kept);
//! 5. spawns the command in its own process group, with a parent-death signal (SIGKILL), stdin
//!    `/dev/null`, stdout and stderr a pipe the shim drains into the run's log, kept under
//!    `max_log_size` (`pump`, [`runrecord::log`]);
//! 6. writes `running`, tells the daemon `running <pid>` on stdout;
//! 7. waits — for the command, its output and signals, in one `poll` — passing termination
//!    requests on to the process group, enforcing the timeout and the kill grace;
//! 8. ends whatever the command left running, in its process group or out of it: it made
//!    itself the child subreaper before step 5, so what left the group (`setsid`, a double
//!    fork) was handed to it ([`crate::sys::subreaper`]). SIGTERM to the group and to each
//!    such child, up to the kill grace (what remains of it when a termination was under way),
//!    then SIGKILL to what is left; durably writes `exit` (retried until it is on disk), and
//!    only then releases the lock;
//! 9. exits — or, forked by the fork server, closes its report pipe and waits for the server
//!    to hand it the next run (`idle`), which it supervises from step 2 on, as long as it is
//!    still the process it was forked as.
//!
//! The shim is single-threaded and must stay so: the parent-death signal is tied to the *thread*
//! that forked the command, so a thread that forked and then ended would kill the command early,
//! and a signal mask only protects the thread that set it. [`main`] runs before any tokio runtime
//! exists; nothing here starts a thread.
//!
//! The folder owns the shim whole: [`args`] its arguments, `write` the retried writes of its
//! records, `pump` the copy of the command's output into a bounded log, [`forkserver`] the
//! process that forks it without an exec. The run's files it writes, and their format, are
//! [`runrecord`]'s. Its system calls go through
//! [`crate::sys`]. The points where tests inject crashes into it are registered, with what
//! recovery must do after each, in [`crate::failpoints::SHIM`] (feature `failpoints`,
//! configured by the `FAILPOINTS` environment variable).

pub mod args;
mod failpoint_macros;
mod forked;
pub mod forkserver;
mod idle;
pub mod log;
mod process_name;
mod pump;
mod supervise;
mod write;

pub use args::ShimArgs;

use std::ffi::OsString;

use crate::failpoints::scenario as failpoint_scenario;
use crate::sys::{files, process, signals};
use log::warn;
use supervise::{supervise_claim, Own, EXIT_FAILED, EXIT_USAGE, SHIM_SIGNALS};

/// Runs the shim for the arguments that follow `fleet shim`, and returns the process exit status
/// to use: 0 when the command's fate is recorded in the `exit` record (whatever the command's
/// own status) or when the claim was tombstoned; 1 when the shim could not do its job (it says
/// why on stderr; recovery reads the run's files); 2 for bad arguments.
///
/// Never returns before the `exit` record is durable, except for a tombstoned claim (nothing was
/// started) and setup failures (the run's lock, the tombstones: nothing was started
/// either). A record that cannot be written (`started`, `exit`: a full disk, a failing one) is
/// retried with backoff while the shim keeps the lock, for as long as it takes: giving up would
/// turn a real exit status into `lost`.
///
/// Must be called on the process's only thread, before any async runtime or other thread
/// exists: the parent-death signal follows the thread that forked the command, and the signal
/// mask set here protects only this thread.
///
/// # Safety
///
/// Must be the first thing its process does with descriptors: every descriptor above stderr
/// is closed here, as inherited. One that other code in the process owned (a file, a socket, a
/// runtime's pipe) would be closed under its owner, whose later use or drop would then reach
/// whatever reused the number.
pub unsafe fn main(args: &[OsString]) -> i32 {
    // First of all, so that no termination request or child exit is lost before the wait loop.
    let signals = match signals::block(&SHIM_SIGNALS) {
        Ok(set) => set,
        Err(e) => {
            warn(format_args!("fleet shim: could not block signals: {e}"));
            return EXIT_FAILED;
        }
    };
    // Dispositions survive exec: whatever its starter ignored (SIGCHLD above all, which would
    // let the kernel reap the command behind the shim's back) goes back to the default, as in a
    // forked shim. Blocked first, so nothing arriving meanwhile is lost.
    signals::restore_all_defaults();
    let args = match ShimArgs::from_args(args) {
        Ok(a) => a,
        Err(m) => {
            warn(format_args!("fleet shim: bad arguments: {m}"));
            return EXIT_USAGE;
        }
    };
    log::set(args.log);
    // Whatever the daemon inherited and did not mark close-on-exec (a service manager's or a
    // test harness's descriptors) would otherwise reach every command.
    // SAFETY: the caller's guarantee (# Safety): nothing in this process owns a descriptor
    // above stderr yet, so every one closed here is an inherited copy nothing uses.
    if let Err(e) = unsafe { files::close_from(3) } {
        warn(format_args!(
            "fleet shim: could not close inherited descriptors: {e}"
        ));
        return EXIT_FAILED;
    }
    // Keep the scenario alive for the shim's whole life: it holds the failpoint configuration.
    let _scenario = match failpoint_scenario() {
        Ok(s) => s,
        Err(_) => {
            warn(format_args!("fleet shim: invalid FAILPOINTS"));
            return EXIT_USAGE;
        }
    };
    let own = Own {
        start_time: process::own_stat().map(|o| o.start_time),
    };
    supervise_claim(&args, &signals, &own)
}
