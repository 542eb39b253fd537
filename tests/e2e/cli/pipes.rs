//! Running a `fleet` command whose stdout or stderr is a pipe nobody reads any more, to its end
//! with a deadline.

use std::os::fd::OwnedFd;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::CMD_DEADLINE;

/// The write end of a pipe whose read end is already closed: every write to it fails with
/// EPIPE, exactly as when the reader of a shell pipeline (`| head -n 1`, `| true`) has exited.
pub fn closed_pipe() -> OwnedFd {
    let (read, write) = open_pipe();
    drop(read);
    write
}

/// A pipe: (read end, write end). Both ends are close-on-exec: a process that another test
/// starts meanwhile must not inherit the read end and keep the pipe readable (the write end
/// given to a command as its stdout or stderr is a copy made for it, without the flag).
pub fn open_pipe() -> (OwnedFd, OwnedFd) {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe")
}

/// How a command run by [`run_closed`] ended.
#[derive(Debug)]
pub struct Ended {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it wrote on the stream that was not closed ("" if both were).
    pub other: String,
}

impl Ended {
    /// The exit code (`None` if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// Which of the command's streams is the closed pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// stdout is closed; stderr is captured.
    Stdout,
    /// stderr is closed; stdout is captured.
    Stderr,
    /// Both are closed.
    Both,
}

/// Runs `cmd` (stdin `/dev/null`) with the stream(s) `closed` on a closed pipe, capturing the
/// other one in `capture` (a file); kills it and panics after the command deadline.
pub fn run_closed(mut cmd: Command, closed: Closed, capture: &std::path::Path) -> Ended {
    let file = std::fs::File::create(capture).expect("capture file");
    let (out, err): (Stdio, Stdio) = match closed {
        Closed::Stdout => (closed_pipe().into(), file.into()),
        Closed::Stderr => (file.into(), closed_pipe().into()),
        Closed::Both => (closed_pipe().into(), closed_pipe().into()),
    };
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let what = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    // `cmd` holds the parent's copies of the pipes' write ends; they go with it.
    drop(cmd);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > CMD_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {CMD_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ended {
        status,
        other: std::fs::read_to_string(capture).unwrap_or_default(),
    }
}
