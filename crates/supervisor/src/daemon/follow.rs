//! Following a shim: the tasks that turn what a shim shows of itself into events for the loop.
//!
//! A shim this daemon started reports on a pipe ([`watch_shim`]): a `running PID` line once its
//! command started, then the pipe's end-of-file when it is gone. A shim that is not our child and
//! has no pipe to us (a run adopted at startup), or whose pipe closed an instant before the
//! kernel dropped its lock, is followed through its run's lock instead ([`watch_lock`]). A run
//! whose shim died while processes of its command's group live on is followed through that
//! group ([`watch_group`]).
//!
//! Used by `spawn` (a new shim), `recover` (adopted runs) and `eval` (a shim whose pipe ended
//! with its lock still held). This module only watches and sends [`Event`]s: it must never touch
//! the daemon's state, the slot pool or the database, and never decide what a report means.

use std::path::Path;

use runrecord::RunFiles;
use store::RunId;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::events::{Event, Events};
use crate::backoff::Backoff;

/// Follows one shim this daemon started: its `running PID` line, then its end — the report
/// pipe's end-of-file (every copy of the write end is the shim's), and for an exec'd shim, which
/// is our child, its exit status too (so it is reaped).
pub(super) async fn watch_shim(
    report: impl tokio::io::AsyncRead + Unpin,
    child: Option<tokio::process::Child>,
    run_id: RunId,
    token: u64,
    events: Events,
) {
    let mut lines = BufReader::new(report).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(pid) = line
            .strip_prefix("running ")
            .and_then(|p| p.trim().parse().ok())
        {
            let _ = events.send(Event::ShimRunning { run_id, token, pid });
        }
    }
    if let Some(mut child) = child {
        let _ = child.wait().await;
    }
    let _ = events.send(Event::ShimExited { run_id, token });
}

/// Waits, on a plain thread, for the shim of `run_id` (state directory `state_dir`) to release
/// its run's lock, then reports it exited. For a run adopted at startup, and for a shim whose
/// report pipe closed an instant before the kernel dropped its lock. A plain thread, not the
/// blocking pool: it may wait for days, and must never hold up the runtime's shutdown.
pub(super) fn watch_lock(state_dir: &Path, run_id: RunId, token: u64, events: Events) {
    let dir = RunFiles::new(state_dir, run_id);
    let _ = std::thread::Builder::new()
        .name(format!("adopted-{run_id}"))
        .spawn(move || {
            // An error leaves nothing to wait on: the settling that follows looks again.
            let _ = dir.wait_released();
            let _ = events.send(Event::ShimExited { run_id, token });
        });
}

/// How often [`watch_group`] looks whether an orphaned command's process group is empty, at
/// most (it starts at [`GROUP_POLL_FIRST`] and doubles: a group just sent SIGKILL is gone
/// within milliseconds, one left alone may run for hours).
const GROUP_POLL_MAX: std::time::Duration = std::time::Duration::from_secs(1);
/// The first wait of [`watch_group`].
const GROUP_POLL_FIRST: std::time::Duration = std::time::Duration::from_millis(5);

/// Waits, on a plain thread, for the process group `pgid` within `session` (the shim's pid and
/// start time) — what is left of `run_id`'s command after its shim died — to have no running
/// process left ([`crate::sys::process::group_alive`]), then reports the shim exited, so that
/// the run is settled again (and ends `lost`). With no `session` (a run whose files, which name
/// the shim, were removed) any running process of the group number counts. Polls, from
/// [`GROUP_POLL_FIRST`] up to [`GROUP_POLL_MAX`] apart: nothing lets a process that is not
/// their parent wait for the end of a group's processes. A plain thread, for the reasons of
/// [`watch_lock`].
pub(super) fn watch_group(
    pgid: i32,
    session: Option<crate::sys::process::Session>,
    run_id: RunId,
    token: u64,
    events: Events,
) {
    let _ = std::thread::Builder::new()
        .name(format!("orphaned-{run_id}"))
        .spawn(move || {
            let mut poll = Backoff::<std::time::Instant>::new(GROUP_POLL_FIRST, GROUP_POLL_MAX);
            // An unreadable /proc counts as "still there" and is looked at again after the
            // wait: ending the wait on it would hand the run back to settling, which may again
            // find it orphaned (a group known by number, unsure, is held), and the two would
            // take turns without pause.
            let alive = || crate::sys::process::group_alive(pgid, session);
            while alive().unwrap_or(true) {
                std::thread::sleep(poll.next_wait());
            }
            let _ = events.send(Event::ShimExited { run_id, token });
        });
}
