//! The shim in a process the fork server forked: what a fresh exec would have given it, set up
//! by hand (signal dispositions, session, standard descriptors, name), then the runs it
//! supervises — the one it was forked for, and each the server hands it after ([`super::idle`]),
//! for as long as it is still the process it was forked as.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use super::args::MAX_REQUEST;
use super::log::warn;
use super::process_name::take_name;
use super::supervise::{supervise_claim, Own, EXIT_FAILED, EXIT_OK, SHIM_SIGNALS};
use super::{idle, log, ShimArgs};
use crate::sys::signals;
use crate::sys::{files, process, settings, subreaper};

/// The shim in a process the fork server has just forked (see [`super::forkserver`]): the same work as
/// [`main`], without an exec of the fleet binary (which costs more CPU than the command of a
/// short run). Returns the process exit status, as [`main`] does. Only the fork server calls
/// it.
///
/// The fork server leaves the new process as a copy of itself, so this first undoes what a
/// fresh exec would have given: signal dispositions back to their defaults (the server ignores
/// SIGCHLD, so that the kernel reaps its children — a shim that kept that could not wait for its
/// command — and the termination signals, which `sigtimedwait` could then never see), its own
/// session, stdin `/dev/null`, `report` as stdout (the pipe the daemon reads `running PID` from
/// and whose end-of-file tells it the shim is gone), and no other descriptor open.
///
/// Failpoints are the fork server's (it set them up; the forked copy has them already).
///
/// Must be called in the forked child only, before anything else, on its only thread.
///
/// # Safety
///
/// Every descriptor above stderr but `report` is closed here. The caller guarantees that no
/// code owning one of them ever uses or drops it again in this process: once this returns, the
/// process ends at once, without running the destructors of the frames below this call, so
/// nothing uses or closes those numbers after they are reused.
/// `altered`: the signals whose disposition the server changed from the default (its
/// [`signals::altered`]), which this copy of it sets back.
pub(super) unsafe fn main_forked(
    args: &ShimArgs,
    report: OwnedFd,
    back: BorrowedFd<'_>,
    altered: &[i32],
) -> i32 {
    let signals = match signals::block(&SHIM_SIGNALS) {
        Ok(set) => set,
        Err(e) => {
            warn(format_args!("fleet shim: could not block signals: {e}"));
            return EXIT_FAILED;
        }
    };
    log::set(args.log);
    // One read of `/proc/self/stat` for both the name's argument area and the start time.
    let own_stat = process::own_stat();
    // SAFETY: the caller's guarantee (# Safety), which is the one `set_up_forked` asks for.
    let back = match unsafe { set_up_forked(args, report, back, altered, own_stat.as_ref()) } {
        Ok(back) => back,
        Err(e) => {
            warn(format_args!(
                "fleet shim: run {} claim {}: could not set up the forked shim: {e}",
                args.run_id, args.token
            ));
            return EXIT_FAILED;
        }
    };
    let own = Own {
        start_time: own_stat.as_ref().map(|o| o.start_time),
    };
    // As forked: what a reused shim must still be before it takes another run.
    let as_forked = settings::own_settings();
    let mut code = supervise_claim(args, &signals, &own);
    // Its run ended and recorded, the shim offers itself for the next one (see
    // `forkserver::IdleShims`), and supervises each run it is given the same way — unless it
    // is no longer the process it was forked as: a process of the run is still its child (one
    // that could not be killed, having changed user; the next run would take it for one of its
    // own leftovers), or a command changed the shim's limits, priority, CPUs or cgroup through
    // its parent's pid (the next run's command would inherit them).
    // Made once: every request of this shim's life is read into it.
    let mut request = vec![0u8; MAX_REQUEST];
    while code == EXIT_OK && !subreaper::has_children() && settings::own_settings() == as_forked {
        let Some(next) = idle::next_run(&back, &signals, own_stat.as_ref(), &mut request) else {
            break;
        };
        code = supervise_claim(&next, &signals, &own);
    }
    code
}

/// The forked shim's own process state (see [`main_forked`]), its signals already blocked.
///
/// # Safety
///
/// As for [`main_forked`]: no code owning a descriptor above stderr, other than `report`, ever
/// uses or drops it again in this process.
unsafe fn set_up_forked(
    args: &ShimArgs,
    report: OwnedFd,
    back: BorrowedFd<'_>,
    altered: &[i32],
    own_stat: Option<&process::OwnStat>,
) -> io::Result<OwnedFd> {
    // Blocked first, so a termination request arriving now waits for the loop. Only those
    // the server changed: every other one is the default already.
    signals::restore_defaults(altered);
    take_name(Some(args.run_id), own_stat);
    process::new_session()?;
    // Standard output first, and /dev/null opened only then: if the daemon was started with
    // standard input closed, `report` arrived as descriptor 0, and putting /dev/null there
    // first would replace it (the daemon would then read end-of-file from a live shim).
    files::set_stdout(report)?;
    let null = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    files::set_stdin(OwnedFd::from(null))?;
    // Everything else the server had (its socket, the idle shims' sockets) goes now: a
    // command must never inherit the daemon's pipes. The way back to the server stays, on
    // descriptor 3, which the command's exec closes.
    let back = back.try_clone_to_owned()?;
    // SAFETY: `report` and /dev/null were handed to stdout and stdin above, and `back` was
    // duplicated into a descriptor of this process's own, so this process owns nothing else
    // above stderr. What else is open there (the server's sockets, and whatever the daemon
    // had) belongs to frames below this call that, by the caller's guarantee, never use or
    // drop it again: nothing uses or closes those numbers after this.
    let back = unsafe { files::keep_only_stdio_and(back) }?;
    files::close_on_exec(&back)?;
    Ok(back)
}
