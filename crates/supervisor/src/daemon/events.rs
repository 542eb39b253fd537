//! What wakes the daemon's loop: one closed set of [`Event`]s on one channel.
//!
//! Everything outside the loop task — shim watchers, adopted-run waiters, the control socket,
//! the config watcher, the signal handlers — only *sends* an event; the loop alone acts on them
//! (see [`super::event_loop`]). This module must never hold state nor act on an event itself.

use store::RunId;
use tokio::sync::mpsc;

/// Something the loop must hear about. Every event but [`Event::Stop`] asks for an EVAL; all the
/// events waiting when the loop wakes are taken together, so the triggers that arrive during an
/// EVAL are coalesced into exactly one more.
#[derive(Debug)]
pub(super) enum Event {
    /// A shim started its run's command (the `running PID` line on its report pipe).
    ShimRunning {
        /// The run.
        run_id: RunId,
        /// The claim the shim belongs to.
        token: u64,
        /// The command's pid.
        pid: i32,
    },
    /// A shim is gone: its report pipe closed, or the run's lock was released (adopted runs).
    /// Its run files say how the run ended.
    ShimExited {
        /// The run.
        run_id: RunId,
        /// The claim the shim belonged to.
        token: u64,
    },
    /// Something may have changed in the database (a command's nudge on the control socket, or
    /// a transition the loop itself left to write): EVAL now rather than at the next tick.
    Nudge,
    /// Re-read fleet.toml now (`fleet reload`, SIGHUP), then EVAL.
    Reload,
    /// fleet.toml may have been edited: re-read it once it has been quiet for a while
    /// ([`super::config_file::RELOAD_SETTLE`]).
    ConfigEdited,
    /// SIGTERM or SIGINT (named here): stop the loop and leave the shims running.
    Stop(&'static str),
}

/// The sending side, cloned into everything that may wake the loop.
pub(super) type Events = mpsc::UnboundedSender<Event>;

/// The receiving side, owned by the loop.
pub(super) type Inbox = mpsc::UnboundedReceiver<Event>;

/// A new channel. Unbounded: a sender never waits for the loop, which may be busy in an EVAL,
/// and the events are few (about two per run, plus nudges).
pub(super) fn channel() -> (Events, Inbox) {
    mpsc::unbounded_channel()
}
