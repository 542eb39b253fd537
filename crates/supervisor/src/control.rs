//! The daemon's control socket, `<state_dir>/daemon.sock`: commands such as `fleet enqueue`
//! nudge the daemon through it so that an EVAL follows at once instead of at the next tick.
//!
//! A nudge is only a hint: every fact lives in the database, so a lost nudge costs at most one
//! tick of latency, never a run.

use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A message to the daemon, one line on the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nudge {
    /// Something changed in the queue (enqueue, cancel): EVAL now.
    Eval,
    /// Re-read fleet.toml now, then EVAL.
    Reload,
}

impl Nudge {
    /// The line sent on the socket.
    pub fn as_str(self) -> &'static str {
        match self {
            Nudge::Eval => "eval",
            Nudge::Reload => "reload",
        }
    }

    /// Parses a received line.
    pub fn parse(line: &str) -> Option<Nudge> {
        match line.trim() {
            "eval" => Some(Nudge::Eval),
            "reload" => Some(Nudge::Reload),
            _ => None,
        }
    }
}

/// Sends a nudge to the daemon of the state directory whose socket is `socket`.
/// Errors when no daemon listens (callers that only hint ignore that).
pub fn send(socket: &Path, nudge: Nudge) -> io::Result<()> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(nudge.as_str().as_bytes())?;
    stream.write_all(b"\n")?;
    Ok(())
}
