//! The shim: a tiny per-run monitor that owns one run's command, outlives a daemon crash, and
//! records the command's exit status in the run's files. It starts the command, waits for it,
//! enforces its timeout, ends what it left running and writes down how it ended; the next
//! daemon adopts a shim whose daemon died. It never touches the database and never decides a
//! run's fate (that is [`crate::settle`]'s, from what it wrote).
//!
//! The daemon starts a shim in its own session with stdout a pipe to the daemon (the *report
//! pipe*), stderr inherited, and the command's environment already set, in one of two ways:
//! forked by the [`forkserver`] (`forked::main_forked`; then named `shim-<run id>` in `ps`, and
//! `shim-idle` between runs), or, without one, exec'd as `fleet shim ARGS…` (hidden; [`main`],
//! to which `fleet`'s `main` hands over before anything else exists). Either way it reports on
//! the pipe: its `running PID` line once the command started, then end-of-file when it is done
//! with the run. The shim:
//!
//! 1. blocks SIGCHLD, SIGTERM, SIGINT and SIGHUP before anything else, so that none is lost
//!    (they are consumed synchronously with `sigtimedwait`, or a `signalfd` in the wait loop; no
//!    handlers, no threads);
//! 2. takes the run's lock: an exclusive OFD lock (`F_OFD_SETLKW`) on the bytes of the run's
//!    record slot in its segment, `runs/records-<first id>` ([`runrecord::slot`]; the segment
//!    and `runs/` made if missing; opened `O_CLOEXEC`, so the command never inherits it), held
//!    until the run is over. Like an `flock`, the kernel drops it when the shim dies, so a free
//!    lock proves the shim gone or done with the run, and no reused pid can be mistaken for it;
//! 3. looks, from one read of its record slot, for a `tombstone` of its claim token (recovery
//!    gave the claim up while this shim was late: it exits without starting) and for a
//!    `started` record of another claim (the command was started once already: it records an
//!    exit of outcome `already_started` instead of starting it; see [`crate::settle`]);
//! 4. appends the `started` record (its pid and start time, which identify its session) to its
//!    record slot, without a sync: every reader sees it at once through the page cache, and a
//!    restart of the machine, which may lose it, is told apart by [`crate::boot`]. From here on
//!    the command *may* have started. A record that cannot be written (a full disk, say) is
//!    retried with backoff while the lock is kept;
//! 5. makes itself the child subreaper ([`crate::sys::subreaper`]), then spawns the command
//!    ([`crate::sys::spawn`]: a `vfork`-style clone whose child sets the command up and execs
//!    it without copying the shim's memory; the program is looked up in the run's own `PATH`,
//!    and no shell is tried for a file that is not an executable) in its own process group,
//!    with the parent-death signal SIGKILL, an empty signal mask and default dispositions,
//!    stdin `/dev/null`, stdout and stderr a pipe the shim drains into the run's log, kept under
//!    `max_log_size` (`pump`, [`runrecord::log`]; the log file is made at the first output, so
//!    a command that writes nothing leaves none). A spawn failure is recorded as an `exit`
//!    record of outcome `spawn_failed`, with the reason in the log too;
//! 6. writes `running` (the command's pid: with the shim's own pid and start time from
//!    `started`, it identifies the command's process group should the shim die; not synced)
//!    and prints `running PID` on the report pipe;
//! 7. waits — for the command, its output and signals, in one `poll` — passing a termination
//!    request on to the process group, enforcing `timeout` (SIGTERM to the group, SIGKILL after
//!    `kill_grace`), and reaping the adopted orphans that end on their own;
//! 8. ends what the command left running: SIGTERM to the group and to every child it has
//!    outside the group — what left the group (`setsid`, a double fork) was handed to it as the
//!    subreaper when its parent died, and so were the group's processes as theirs did — and
//!    waits for them up to `kill_grace` (a termination already under way keeps its deadline);
//!    then SIGKILLs whatever is left in the group and every child it still has, until it has
//!    none (each one killed may hand over its own). It then appends the `exit` record and
//!    `fdatasync`s it (retried until it is on disk), and only then releases the lock;
//! 9. exits — or, forked by the fork server, closes its report pipe (the daemon reads the run's
//!    end from that end-of-file, as from an exit) and offers itself to the server for the next
//!    run (`idle`), which it takes up from step 2 under that run's name.
//!
//! # Between runs
//!
//! Reusing a forked shim saves its fork, its copy-on-write faults and the teardown of its
//! address space at exit (about 0.3 ms of CPU per run, docs/PERFORMANCE.md, "What a process per
//! run costs"). Between runs it holds no descriptor but the standard three (stdout
//! `/dev/null`) and its sockets to the server; it exits when the server lets it go
//! ([`forkserver::IDLE_FOR`] without a run, or no answer within [`forkserver::ANSWER_WITHIN`]
//! when handed one) or ends. It exits instead of offering itself when it is no longer the
//! process it was forked as: a process of the run is still its child (one it could not kill),
//! or a command changed its limits, priority, scheduling, CPUs, OOM score, core dump filter,
//! autogroup, timer slack or cgroup through its parent's pid
//! ([`crate::sys::settings::own_settings`], compared with the values at its fork), which the
//! next run's command would inherit. How a signal meant for one run never reaches the next is
//! `idle`'s.
//!
//! The shim is single-threaded and has no async runtime, and must stay so: the parent-death
//! signal is tied to the *thread* that forked the command, so a thread that forked and then
//! ended would kill the command early, and a signal mask only protects the thread that set it.
//! [`main`] runs before any tokio runtime exists; nothing here starts a thread.
//!
//! # Layout
//!
//! The folder owns the shim whole: [`args`] its arguments and their two encodings, `supervise`
//! the steps 2 to 8 that both entries share, `forked` the entry of a forked shim, `idle` a
//! forked shim between runs, `process_name` its name in `ps`, `write` the retried writes of its
//! records, `pump` the copy of the command's output into a bounded log, [`log`] its own log
//! lines, [`forkserver`] the process that forks it without an exec. The run's files it writes,
//! and their format, are [`runrecord`]'s. Its system calls go through [`crate::sys`]. The
//! points where tests inject crashes into it (`failpoint_macros`) are registered, with what
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
pub mod start;
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
