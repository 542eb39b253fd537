//! Running one process to its end with a deadline, capturing what it printed. It never leaves
//! the process running: past the deadline it is killed and reaped before the test fails.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished `fleet` command left.
#[derive(Debug)]
pub struct Output {
    /// How it ended.
    pub status: ExitStatus,
    /// Everything it wrote on stdout (lossily decoded).
    pub stdout: String,
    /// Everything it wrote on stderr (lossily decoded).
    pub stderr: String,
}

impl Output {
    /// The exit code (`None` if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// Runs `cmd` (stdin `/dev/null`) to the end, capturing its output; kills it and panics after
/// `deadline`. Panics if it cannot be started.
pub fn run_with_deadline(mut cmd: Command, deadline: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let what = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    // Both pipes are drained at once, or a command filling one would block on it forever.
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: String::from_utf8_lossy(&t_out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&t_err.join().unwrap()).into_owned(),
    }
}
