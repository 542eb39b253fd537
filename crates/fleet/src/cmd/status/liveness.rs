//! `fleet status`'s verdict on the daemon: running (it holds the state directory and its loop is
//! evaluating), stuck (it holds it but its loop does not turn, or it does not answer), or
//! stopped (nobody holds it), and the exit status each gives (0, 1, 3, as `systemctl
//! is-active` uses 0 and 3).

use std::io::ErrorKind;
use std::time::Duration;

use serde_json::{json, Value};
use supervisor::control::{ask_health, HealthReply};
use supervisor::statedir::StateDir;

/// How long `fleet status` waits for the daemon's answer: a healthy daemon answers at once
/// (from its heartbeat, without waiting for its loop); one that does not within this is stopped
/// (SIGSTOP) or wedged.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// What `fleet status` found the daemon to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It holds the state directory and its loop is evaluating: exit 0.
    Running,
    /// It holds the state directory but its loop is stuck or it does not answer: exit 1.
    Stuck(String),
    /// No daemon holds the state directory: exit 3.
    Stopped,
}

impl Liveness {
    /// Asks the daemon holding `state` (`holder`: the pid the lock names, if any) for its
    /// health over the control socket.
    pub fn probe(state: &StateDir, holder: Option<i32>) -> Liveness {
        let Some(pid) = holder else {
            return Liveness::Stopped;
        };
        match ask_health(&state.socket_path(), ANSWER_TIMEOUT) {
            Ok(HealthReply::Evaluating) => Liveness::Running,
            Ok(HealthReply::Stuck(reason)) => Liveness::Stuck(reason),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Liveness::Stuck(format!(
                    "the daemon (pid {pid}) holds the state directory but did not answer within \
                     {} (stopped, or wedged)",
                    humantime::format_duration(ANSWER_TIMEOUT)
                ))
            }
            // Nobody listens: the daemon may have stopped since the lock was read (it closes
            // its socket before it lets the lock go).
            Err(_) if matches!(state.daemon_holder(), Ok(None)) => Liveness::Stopped,
            Err(e) => Liveness::Stuck(format!(
                "the daemon (pid {pid}) holds the state directory but its control socket {} \
                 does not answer (still taking over, or wedged): {e}",
                state.socket_path().display()
            )),
        }
    }

    /// The `daemon.state` word of `fleet status --json`.
    pub fn word(&self) -> &'static str {
        match self {
            Liveness::Running => "running",
            Liveness::Stuck(_) => "stuck",
            Liveness::Stopped => "stopped",
        }
    }

    /// The `daemon.state` and `daemon.reason` fields.
    pub fn fields(&self) -> (Value, Value) {
        let reason = match self {
            Liveness::Stuck(r) => json!(r),
            _ => Value::Null,
        };
        (json!(self.word()), reason)
    }

    /// The exit status of `fleet status`: 0 running, 1 stuck, 3 stopped.
    pub fn exit_code(&self) -> u8 {
        match self {
            Liveness::Running => 0,
            Liveness::Stuck(_) => 1,
            Liveness::Stopped => 3,
        }
    }
}
