//! The daemon's control socket, `<state_dir>/daemon.sock`: commands such as `fleet enqueue`
//! nudge the daemon through it so that an EVAL follows at once instead of at the next tick.
//!
//! A nudge is only a hint: every fact lives in the database, so a lost nudge costs at most one
//! tick of latency, never a run.
//!
//! Two requests have an answer. `slots` ([`ask_slots`]): the runs whose slots the daemon held
//! at its loop's last turn, which `fleet check` compares with the database. And `health`, which
//! `fleet status` sends to learn whether the
//! daemon's loop is evaluating. The daemon answers it from its heartbeat
//! ([`health::Health`]) without waiting for the loop, so a stuck loop still answers
//! `stuck`; a stopped (SIGSTOP) or wedged process does not answer at all, which the client's
//! timeout turns into "stuck" too.

use std::io::{self, BufRead, BufReader, Write};
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

/// The line that asks the daemon for the runs it holds slots for ([`ask_slots`]).
pub const SLOTS_REQUEST: &str = "slots";

/// The answer to [`SLOTS_REQUEST`]: `slots` and each run id, space-separated, on one line.
pub fn slots_line(ids: &[i64]) -> String {
    let mut line = String::from("slots");
    for id in ids {
        line += &format!(" {id}");
    }
    line
}

/// Asks the daemon listening on `socket` for the runs whose slots it held at its loop's last
/// turn, waiting at most `timeout` for each of the write and the read of the answer.
///
/// Errors: as [`ask_health`].
pub fn ask_slots(socket: &Path, timeout: Duration) -> io::Result<Vec<i64>> {
    let line = ask(socket, SLOTS_REQUEST, timeout)?;
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "unexpected answer to a slots request: {:?}",
                line.trim_end()
            ),
        )
    };
    let mut words = line.split_whitespace();
    if words.next() != Some("slots") {
        return Err(bad());
    }
    words.map(|w| w.parse().map_err(|_| bad())).collect()
}

/// Sends `request` to the daemon listening on `socket` and reads its one-line answer.
fn ask(socket: &Path, request: &str, timeout: Duration) -> io::Result<String> {
    let (address, _folder) = addressable(socket)?;
    let mut stream = UnixStream::connect(&address)?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(request.as_bytes())?;
    stream.write_all(b"\n")?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    Ok(line)
}

/// The line that asks the daemon for its health ([`ask_health`]).
pub const HEALTH_REQUEST: &str = "health";

/// The daemon's answer to [`HEALTH_REQUEST`]: one line, `evaluating` or `stuck REASON`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HealthReply {
    /// Its loop completed a turn recently (see [`health::Verdict::Evaluating`]).
    Evaluating,
    /// Its loop did not, for the reason given (one line).
    Stuck(String),
}

impl HealthReply {
    /// The reply for a heartbeat verdict.
    pub fn from_verdict(verdict: &health::Verdict) -> HealthReply {
        match verdict {
            health::Verdict::Evaluating { .. } => HealthReply::Evaluating,
            health::Verdict::Stuck { reason } => HealthReply::Stuck(reason.clone()),
        }
    }

    /// The line sent on the socket (without its newline).
    pub fn line(&self) -> String {
        match self {
            HealthReply::Evaluating => "evaluating".into(),
            HealthReply::Stuck(reason) => format!("stuck {}", reason.replace('\n', " ")),
        }
    }

    /// Parses a received line; `None` for anything else.
    pub fn parse(line: &str) -> Option<HealthReply> {
        let line = line.trim_end_matches(['\r', '\n']);
        if line == "evaluating" {
            return Some(HealthReply::Evaluating);
        }
        line.strip_prefix("stuck ")
            .map(|reason| HealthReply::Stuck(reason.to_string()))
    }
}

/// Asks the daemon listening on `socket` for its health, waiting at most `timeout` for each of
/// the write and the read of the answer.
///
/// Errors: no daemon listens (`NotFound`, `ConnectionRefused`: the caller decides whether that
/// means stopped); no answer within `timeout` (`WouldBlock` or `TimedOut`: a daemon that is
/// stopped or wedged); the connection closed without a valid answer (`InvalidData`).
pub fn ask_health(socket: &Path, timeout: Duration) -> io::Result<HealthReply> {
    let line = ask(socket, HEALTH_REQUEST, timeout)?;
    HealthReply::parse(&line).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "unexpected answer to a health request: {:?}",
                line.trim_end()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_replies_round_trip_on_one_line() {
        for reply in [
            HealthReply::Evaluating,
            HealthReply::Stuck("the loop completed no EVAL for 5s".into()),
        ] {
            assert_eq!(
                HealthReply::parse(&format!("{}\n", reply.line())),
                Some(reply)
            );
        }
        let multi = HealthReply::Stuck("a\nb".into()).line();
        assert!(!multi.contains('\n'));
        assert_eq!(HealthReply::parse("eval"), None);
        assert_eq!(HealthReply::parse(""), None);
    }
}
