//! [`Crashy`]: a daemon started with `FAILPOINTS`, which may abort before it is ever up, and
//! the polling that shows its log when a wait times out. It kills only its own daemon.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;

/// A daemon started with `FAILPOINTS` set. Unlike [`Fleet::start_daemon`], it does not wait for
/// the daemon to be up: a failpoint may abort it before `fleet status` ever sees it. Dropping it
/// kills and reaps the daemon (its shims live on, as after a crash).
pub struct Crashy<'a> {
    daemon: Daemon<'a>,
    failpoints: String,
}

impl<'a> Crashy<'a> {
    /// Starts a daemon with `FAILPOINTS=failpoints` once the previous daemon's lock is free.
    pub fn start(f: &'a Fleet, failpoints: &str) -> Crashy<'a> {
        Crashy::start_with(f, failpoints, &[])
    }

    /// [`Crashy::start`] with more environment variables for the daemon.
    pub fn start_with(f: &'a Fleet, failpoints: &str, env: &[(&str, &str)]) -> Crashy<'a> {
        // A previous daemon's half-spawned shim may still hold the lock (see
        // `wait_daemon_lock_released`).
        wait_daemon_lock_released(&f.state_dir());
        Crashy::spawn_with(f, failpoints, env)
    }

    /// [`Crashy::start`] without waiting for the daemon lock to be free.
    pub fn spawn(f: &'a Fleet, failpoints: &str) -> Crashy<'a> {
        Crashy::spawn_with(f, failpoints, &[])
    }

    fn spawn_with(f: &'a Fleet, failpoints: &str, env: &[(&str, &str)]) -> Crashy<'a> {
        static N: AtomicU64 = AtomicU64::new(0);
        let log = f.file(&format!(
            "crashy-{}.stderr",
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let mut all = vec![("FAILPOINTS", failpoints)];
        all.extend_from_slice(env);
        Crashy {
            daemon: f.spawn_daemon_logged(&all, &log),
            failpoints: failpoints.to_string(),
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> i32 {
        self.daemon.pid()
    }

    /// Its exit status if it has exited (reaped now if it just did).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.daemon.try_exit()
    }

    /// Its exit status if it was already seen to end.
    pub fn exited(&self) -> Option<ExitStatus> {
        self.daemon.exited()
    }

    /// What it logged so far.
    pub fn stderr(&self) -> String {
        self.daemon.stderr()
    }

    /// Its failpoints, exit and log, for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "--- daemon with FAILPOINTS={} (exit: {:?}) ---\n{}",
            self.failpoints,
            self.exited(),
            self.stderr()
        )
    }

    /// Waits until the failpoint aborted the daemon (SIGABRT): proof that it fired.
    pub fn wait_abort(&mut self, f: &Fleet) {
        let start = Instant::now();
        let st = loop {
            if let Some(st) = self.try_exit() {
                break st;
            }
            if start.elapsed() > DEADLINE {
                panic!(
                    "timed out after {DEADLINE:?} waiting for the daemon to abort at its failpoint\n{}\n{}",
                    f.diagnostics(),
                    self.describe()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        };
        assert_eq!(
            st.signal(),
            Some(libc::SIGABRT),
            "the daemon with FAILPOINTS={} should have aborted at the failpoint, but ended {st}\n{}",
            self.failpoints,
            self.describe()
        );
    }

    /// Asserts the daemon is still running: it must survive its shims' crashes.
    pub fn assert_alive(&mut self) {
        if let Some(st) = self.try_exit() {
            panic!(
                "the daemon with FAILPOINTS={} must survive its shims' crashes, but ended {st}\n{}",
                self.failpoints,
                self.describe()
            );
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        self.daemon.kill();
    }
}

/// Polls `cond` with a deadline; on timeout panics with the fleet's diagnostics and the crashing
/// daemons' logs.
pub fn poll(
    f: &Fleet,
    crashies: &[&Crashy<'_>],
    deadline: Duration,
    what: &str,
    cond: impl FnMut() -> bool,
) {
    wait_for(deadline, Duration::from_millis(25), what, cond, || {
        let logs: Vec<String> = crashies.iter().map(|c| c.describe()).collect();
        format!("{}\n{}", f.diagnostics(), logs.join("\n"))
    });
}
