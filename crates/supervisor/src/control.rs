//! The daemon's control socket, `<state_dir>/daemon.sock`: commands such as `fleet enqueue`
//! nudge the daemon through it so that an EVAL follows at once instead of at the next tick.
//!
//! A nudge is only a hint: every fact lives in the database, so a lost nudge costs at most one
//! tick of latency, never a run.

use std::io::{self, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
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

/// A Unix socket address holds at most 107 bytes of path; state directories can be deeper.
/// For a longer path this returns `/proc/self/fd/N/NAME`, where N is a descriptor of the
/// socket's folder (kept open by the returned `File` while the path is in use), which names the
/// same place in a few bytes. Shorter paths come back as they are.
///
/// Errors: the folder cannot be opened.
pub fn addressable(socket: &Path) -> io::Result<(PathBuf, Option<std::fs::File>)> {
    const MAX: usize = 100;
    if socket.as_os_str().len() <= MAX {
        return Ok((socket.to_path_buf(), None));
    }
    let (Some(dir), Some(name)) = (socket.parent(), socket.file_name()) else {
        return Ok((socket.to_path_buf(), None));
    };
    let folder = std::fs::File::open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", folder.as_raw_fd())).join(name);
    Ok((short, Some(folder)))
}

/// Sends a nudge to the daemon of the state directory whose socket is `socket`.
/// Errors when no daemon listens (callers that only hint ignore that).
pub fn send(socket: &Path, nudge: Nudge) -> io::Result<()> {
    let (address, _folder) = addressable(socket)?;
    let mut stream = UnixStream::connect(&address)?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(nudge.as_str().as_bytes())?;
    stream.write_all(b"\n")?;
    Ok(())
}
