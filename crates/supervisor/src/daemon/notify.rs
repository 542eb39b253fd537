//! The daemon under systemd: the sd_notify messages (`READY=1`, `STATUS=…`, `WATCHDOG=1`,
//! `STOPPING=1`) it sends to the service manager's `NOTIFY_SOCKET`, and nothing at all when that
//! variable is unset.
//!
//! Every message but `STOPPING` is sent from `turn` (`daemon/turn.rs`), the loop's
//! record of a completed turn (an EVAL, or an idle tick), so that what systemd hears follows the
//! loop itself:
//! - `READY=1` at the first turn: recovery is done (the loop turns only once it is) and the first
//!   EVAL ran, so a unit ordered after fleet's starts once the runs a crash left are settled;
//! - `WATCHDOG=1` at a turn once half the watchdog timeout (`WATCHDOG_USEC`) has passed since
//!   the last ping: a loop that stops turning (wedged, a database that stays locked, stopped)
//!   stops pinging, and systemd restarts the daemon — a timer of its own would ping on. The one
//!   exception is an outage of the database ([`Notifier::outage_ping`]): the loop is alive and
//!   waiting as it should, and a restart would only wait again;
//! - `STATUS=` a one-line summary (`2 active, 5 queued`), at the first turn and then at most
//!   every [`STATUS_EVERY`]: it costs two counts on the database, not worth paying at every EVAL.
//!
//! The datagram is sent here, not by the `sd-notify` crate: its 0.5 release only reaches a
//! socket path, and `NOTIFY_SOCKET=@name` (the abstract namespace, which the protocol allows and
//! systemd uses in containers) must work too.

use std::cell::Cell;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::time::Instant;

/// The shortest time between two `STATUS=` updates.
pub const STATUS_EVERY: Duration = Duration::from_secs(10);

/// The variables of the service manager's protocols, which are the daemon's alone: they are
/// removed from every run's environment (a command that speaks sd_notify would otherwise talk
/// for fleet, and its output goes to its log, not to the journal `JOURNAL_STREAM` names).
pub const SERVICE_VARS: [&str; 4] = [
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "JOURNAL_STREAM",
];

/// What the daemon has told the service manager so far.
#[derive(Debug)]
pub struct Notifier {
    /// `NOTIFY_SOCKET` is set: there is someone to tell.
    pub(super) enabled: bool,
    /// `NOTIFY_SOCKET`: a socket path, or `@name` for the abstract namespace.
    socket: OsString,
    /// The last send failed: further failures are logged at debug until one succeeds, so that a
    /// socket that points nowhere does not warn at every ping.
    failing: Cell<bool>,
    /// The watchdog's ping period (half its timeout), when the service manager asked for one.
    pub(super) ping_every: Option<Duration>,
    /// `READY=1` was sent.
    pub(super) ready: bool,
    /// When the last `WATCHDOG=1` was sent.
    pub(super) last_ping: Option<Instant>,
    /// When the last `STATUS=` was sent.
    pub(super) last_status: Option<Instant>,
}

impl Notifier {
    /// From the environment the daemon was started with: `NOTIFY_SOCKET`, `WATCHDOG_USEC` (and
    /// `WATCHDOG_PID`, which must be this process when set). `tick`: the loop's tick, for the
    /// warning about a watchdog timeout too short to be met.
    pub fn from_env(tick: Duration) -> Notifier {
        let socket = std::env::var_os("NOTIFY_SOCKET").unwrap_or_default();
        let enabled = !socket.is_empty();
        let timeout = sd_notify::watchdog_enabled().filter(|t| !t.is_zero() && enabled);
        if let Some(t) = timeout {
            // Pings come at turns, and an idle loop turns once a tick.
            if t < tick * 4 {
                tracing::warn!(
                    watchdog = %humantime::format_duration(t),
                    tick = %humantime::format_duration(tick),
                    "the watchdog timeout is shorter than four ticks: it may expire on a healthy daemon (raise WatchdogSec)"
                );
            }
        }
        Notifier {
            enabled,
            socket,
            failing: Cell::new(false),
            ping_every: timeout.map(|t| t / 2),
            ready: false,
            last_ping: None,
            last_status: None,
        }
    }

    /// Sends `states`, if there is a service manager; a failure is logged (a warning for the
    /// first of a series, then at debug until a send succeeds again), never fatal: the manager
    /// may be gone, and supervising runs matters more than telling it.
    pub(super) fn send(&self, states: &[NotifyState<'_>]) {
        if !self.enabled || states.is_empty() {
            return;
        }
        let message: String = states.iter().map(|s| format!("{s}\n")).collect();
        match send_datagram(&self.socket, message.as_bytes()) {
            Ok(()) => {
                if self.failing.replace(false) {
                    tracing::info!("the service manager is reachable again (NOTIFY_SOCKET)");
                }
            }
            Err(e) if self.failing.replace(true) => {
                tracing::debug!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
            }
            Err(e) => tracing::warn!(
                error = %e,
                socket = %self.socket.to_string_lossy(),
                "cannot notify the service manager (NOTIFY_SOCKET); further failures are logged \
                 at debug until a message gets through"
            ),
        }
    }

    /// `WATCHDOG=1`, if one is due, and nothing else: sent by the loop at its ticks while the
    /// database cannot be reached, when it completes no turn (see [`super::outage`]).
    pub(super) fn outage_ping(&mut self) {
        let now = Instant::now();
        let due = self.ping_every.is_some_and(|every| {
            self.last_ping
                .is_none_or(|at| now.duration_since(at) >= every)
        });
        if due {
            self.send(&[NotifyState::Watchdog]);
            self.last_ping = Some(now);
        }
    }

    /// `STOPPING=1`: the daemon is shutting down on a stop signal.
    pub fn stopping(&self) {
        self.send(&[NotifyState::Stopping]);
    }
}

/// Sends `message` as one datagram to `socket`: a path, or `@name` for the abstract namespace.
/// Errors: the socket cannot be created, reached, or took less than the whole message.
fn send_datagram(socket: &OsStr, message: &[u8]) -> io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    let sent = match socket.as_bytes().strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(message, &addr)?
        }
        None => sock.send_to(message, socket)?,
    };
    if sent == message.len() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "incomplete datagram",
        ))
    }
}
