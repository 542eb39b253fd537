//! A forked shim between two runs: it offers itself to the fork server for the next run
//! instead of exiting (see `forkserver::IdleShims` for why), and takes that run up as a freshly
//! forked shim would.
//!
//! What makes the reuse invisible to the daemon: the shim offers itself only once its run is
//! wholly over — the `exit` record durable, the run's lock released, whatever the command left
//! running ended — and it closes its report pipe first, so the daemon reads that run's end from
//! the pipe's end-of-file exactly as when a shim exits. The next run arrives with a report
//! pipe of its own.
//!
//! What a termination signal means once a process serves several runs: the daemon signals a
//! shim only for the run it knows the shim to be on, and it asks for a shim (through the fork
//! server) on the same thread, one request at a time. So every signal meant for an earlier run
//! was sent before the request that hands this shim its next run, and is pending here before
//! that request is read: the shim clears them before it answers the fork server, and the daemon
//! learns the shim's pid for the new run only from that answer. A signal that arrives after the
//! answer is meant for the new run.
//!
//! Taking a run is two steps, so that a shim that is stopped or starved never holds up the
//! server nor holds a run it does not start: the server sends the request; the shim clears its
//! signals and answers; only then does the server send the run's report pipe, which makes the
//! run the shim's. A shim that does not answer in time is let go (its socket closed) and starts
//! nothing, and no descriptor of the run is left in its socket.

use std::fs::OpenOptions;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use super::process_name::take_name;
use super::ShimArgs;
use crate::sys::signals::BlockedSignals;
use crate::sys::{fdpass, files, process};

/// Waits for this shim's next run: closes the report pipe of the run that ended (its
/// end-of-file tells the daemon), sends the fork server, on `back`, this shim's pid and a
/// socket to reach it on, and waits there. Returns the next run's arguments, with its report
/// pipe in place as standard output; `None` when the shim should exit instead: the server let
/// it go (idle too long, or the daemon is gone), or something failed — in every such case it
/// has started nothing.
///
/// `signals`: the shim's blocked signals, cleared of what is pending before the shim takes the
/// run (see the module's comment). `own_stat`: the shim's own stat, for its name. `buf`: where
/// the request is read, [`super::args::MAX_REQUEST`] bytes (the largest the server sends).
pub(super) fn next_run(
    back: &OwnedFd,
    signals: &BlockedSignals,
    own_stat: Option<&process::OwnStat>,
    buf: &mut [u8],
) -> Option<ShimArgs> {
    let null = OpenOptions::new().write(true).open("/dev/null").ok()?;
    files::set_stdout(OwnedFd::from(null)).ok()?;
    let (mine, theirs) = fdpass::seqpacket_pair().ok()?;
    let pid = std::process::id() as i32;
    fdpass::send_with_fd(back, &pid.to_ne_bytes(), theirs.as_fd()).ok()?;
    drop(theirs);
    take_name(None, own_stat);
    let n = match fdpass::recv(&mine, buf) {
        Ok(n) if n > 0 => n,
        // End-of-file: let go.
        _ => return None,
    };
    let args = ShimArgs::decode(&buf[..n])?;
    // Termination requests for the earlier run, or sent to an idle shim: none is for this run.
    while signals.wait(Some(Duration::ZERO)).is_some() {}
    // Ready. A failed answer means the server gave up on this shim (it answered too late) or
    // is gone: nothing is started.
    fdpass::send(&mine, &[1]).ok()?;
    // The run is this shim's only once its report pipe arrives: a server that gave up on the
    // answer closes the socket instead, and end-of-file here starts nothing.
    let mut one = [0u8; 1];
    let report = match fdpass::recv_with_fd(&mine, &mut one) {
        Ok(Some((1, Some(report)))) => report,
        _ => return None,
    };
    take_name(Some(args.run_id), own_stat);
    super::log::set(args.log);
    files::set_stdout(report).ok()?;
    Some(args)
}
