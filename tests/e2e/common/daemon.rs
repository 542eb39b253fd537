//! The [`Daemon`] handle: a `fleet daemon` this test started, its log, and its end. Dropping it
//! kills (SIGKILL) and reaps it; it never signals a process other than its own child.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::sync::atomic::Ordering;

use serde_json::Value;

use super::{send_signal, Fleet, Signal, DEADLINE};

/// A running `fleet daemon`. Dropping it kills it (SIGKILL) and reaps it; the [`Fleet`]'s drop
/// then kills whatever shims and commands are left.
pub struct Daemon<'a> {
    fleet: &'a Fleet,
    child: Child,
    /// Kept open so that a command that inherited it by mistake blocks reading it instead of
    /// seeing /dev/null's end of file.
    _stdin: Option<ChildStdin>,
    stderr_path: PathBuf,
    exited: Option<ExitStatus>,
}

impl Fleet {
    /// Starts `fleet daemon` and waits until it holds the state directory (`fleet status` says
    /// running with its pid, and its control socket is bound). Its stderr goes to
    /// `daemon-<n>.stderr` in the temporary folder. Panics if it exits meanwhile.
    pub fn start_daemon(&self) -> Daemon<'_> {
        self.start_daemon_env(&[])
    }

    /// [`Fleet::start_daemon`] with extra environment variables for the daemon.
    pub fn start_daemon_env(&self, env: &[(&str, &str)]) -> Daemon<'_> {
        self.start_daemon_ignoring(env, &[])
    }

    /// [`Fleet::start_daemon_env`] with `ignored` (signal numbers) ignored from the daemon's
    /// start, as a shell's `trap '' SIG` or `nohup` leaves them: ignored dispositions survive
    /// exec, so the daemon inherits them.
    pub fn start_daemon_ignoring(&self, env: &[(&str, &str)], ignored: &[i32]) -> Daemon<'_> {
        let n = self.daemons.fetch_add(1, Ordering::SeqCst);
        let log = self.file(&format!("daemon-{n}.stderr"));
        let mut daemon = self.spawn_daemon_with(env, &log, ignored);
        let pid = daemon.pid();
        self.wait_until(DEADLINE, "the daemon to hold the state directory", || {
            if let Some(st) = daemon.try_exit() {
                panic!("fleet daemon exited at start ({st}):\n{}", daemon.stderr());
            }
            let s = self.status();
            s["daemon"]["running"] == Value::Bool(true)
                && s["daemon"]["pid"].as_i64() == Some(pid as i64)
                // The control socket listens just after the lock is taken; nudges (`reload`,
                // `cancel`) need it. Its file is there a moment before it listens.
                && s["state_dir"]
                    .as_str()
                    .is_some_and(|d| control_socket_listens(&Path::new(d).join("daemon.sock")))
        });
        daemon
    }

    /// Starts `fleet daemon` (with extra environment variables) and returns at once, without
    /// waiting for it to be up: for a daemon that may abort or be refused at start. It logs to
    /// the next `daemon-<n>.stderr`, which [`Fleet::diagnostics`] shows.
    pub fn spawn_daemon(&self, env: &[(&str, &str)]) -> Daemon<'_> {
        let n = self.daemons.fetch_add(1, Ordering::SeqCst);
        self.spawn_daemon_logged(env, &self.file(&format!("daemon-{n}.stderr")))
    }

    /// [`Fleet::spawn_daemon`] logging (stdout and stderr) to `log` instead, which the
    /// diagnostics do not show: for tests that start many daemons. Panics if it cannot start.
    pub fn spawn_daemon_logged(&self, env: &[(&str, &str)], log: &Path) -> Daemon<'_> {
        self.spawn_daemon_with(env, log, &[])
    }

    fn spawn_daemon_with(&self, env: &[(&str, &str)], log: &Path, ignored: &[i32]) -> Daemon<'_> {
        let stderr = std::fs::File::create(log).expect("daemon stderr file");
        let stdout = stderr.try_clone().unwrap();
        let mut c = self.command();
        c.arg("daemon")
            // `E2E_RUST_LOG=debug` when a test needs the daemon's debug lines.
            .env(
                "RUST_LOG",
                std::env::var("E2E_RUST_LOG").unwrap_or("info".into()),
            )
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr);
        for (k, v) in env {
            c.env(k, v);
        }
        if !ignored.is_empty() {
            let ignored = ignored.to_vec();
            // SAFETY: runs in the child between fork and exec, where only async-signal-safe
            // calls are sound: signal(2) is, and the closure allocates nothing (the list was
            // copied before the fork). SIG_IGN installs no handler of ours.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut c, move || {
                    for &sig in &ignored {
                        libc::signal(sig, libc::SIG_IGN);
                    }
                    Ok(())
                });
            }
        }
        let mut child = c.spawn().expect("cannot start fleet daemon");
        let stdin = child.stdin.take();
        Daemon {
            fleet: self,
            child,
            _stdin: stdin,
            stderr_path: log.to_path_buf(),
            exited: None,
        }
    }
}

/// Whether a daemon listens on the control socket `path`: a connection to it is accepted. It is
/// closed at once without a word, which the daemon takes as a client that had nothing to say.
fn control_socket_listens(path: &Path) -> bool {
    supervisor::control::addressable(path)
        .is_ok_and(|(address, _folder)| std::os::unix::net::UnixStream::connect(address).is_ok())
}

impl Daemon<'_> {
    /// The daemon's pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its exit status if it has exited (reaped now if it just did).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().expect("try_wait on the daemon");
        }
        self.exited
    }

    /// Its exit status if an earlier [`Daemon::try_exit`] or [`Daemon::kill`] saw it end
    /// (looks at nothing new).
    pub fn exited(&self) -> Option<ExitStatus> {
        self.exited
    }

    /// Asserts the daemon is still running.
    pub fn assert_alive(&mut self) {
        if let Some(st) = self.try_exit() {
            panic!("the daemon exited ({st}):\n{}", self.stderr());
        }
    }

    /// SIGKILL and reap (shims keep running, as after a crash).
    pub fn kill(&mut self) {
        if self.exited.is_none() {
            // Our own child, not reaped yet: its pid cannot have been reused.
            let _ = self.child.kill();
            self.exited = Some(self.child.wait().expect("wait on the daemon"));
        }
    }

    /// Sends `sig` to the daemon; panics if it cannot be delivered. Only while it has not been
    /// reaped (so its pid is still its own).
    pub fn signal(&self, sig: Signal) {
        assert!(self.exited.is_none(), "the daemon was reaped already");
        send_signal(self.pid(), sig)
            .unwrap_or_else(|e| panic!("signal {sig:?} to the daemon: {e}"));
    }

    /// What the daemon wrote on stderr (and stdout) so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The file it logs to.
    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
    }

    /// The fleet it runs for.
    pub fn fleet(&self) -> &Fleet {
        self.fleet
    }
}

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        self.kill();
    }
}
