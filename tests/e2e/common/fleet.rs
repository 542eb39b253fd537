//! The [`Fleet`] of one test: a temporary folder with its `fleet.toml`, the `fleet` commands run
//! against it, waits on its runs, and the diagnostics a failing test prints. Dropping it kills
//! every process still carrying the test's marker, and only those.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;

use super::{
    fleet_bin, marked_pids, run_with_deadline, send_signal, wait_for, Output, Signal, CMD_DEADLINE,
    DEADLINE, MARKER_VAR,
};

/// How often [`Fleet::wait_until`] checks its condition.
const POLL: Duration = Duration::from_millis(25);

/// One test's fleet: a temporary folder with a `fleet.toml`.
pub struct Fleet {
    dir: tempfile::TempDir,
    /// The config file (absolute).
    pub config: PathBuf,
    /// This test's marker value (see [`MARKER_VAR`]).
    pub marker: String,
    /// How many daemons [`Fleet::spawn_daemon`] started: daemon `n` logs to `daemon-<n>.stderr`.
    pub(super) daemons: AtomicU64,
    /// The `fleet` binary this fleet runs, when not [`fleet_bin`] (see [`Fleet::with_binary`]).
    bin: Option<PathBuf>,
}

impl Fleet {
    /// A fleet whose `fleet.toml` is `toml`. Use [`Fleet::with`] to refer to the folder in it.
    pub fn new(toml: &str) -> Fleet {
        Fleet::with(|_| toml.to_string())
    }

    /// A fleet whose `fleet.toml` is built from the (absolute) folder it lives in.
    pub fn with(toml: impl FnOnce(&Path) -> String) -> Fleet {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = tempfile::Builder::new()
            .prefix("fleet-e2e-")
            .tempdir()
            .expect("tempdir");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let marker = format!(
            "e2e-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst),
            nanos
        );
        let config = dir.path().join("fleet.toml");
        let fleet = Fleet {
            config,
            dir,
            marker,
            daemons: AtomicU64::new(0),
            bin: None,
        };
        fleet.write_config(&toml(fleet.path()));
        fleet
    }

    /// This fleet with every `fleet` command (the daemon included) run from `bin` instead of
    /// [`fleet_bin`]: for a binary installed somewhere else, without what lies beside the
    /// shared one.
    pub fn with_binary(mut self, bin: PathBuf) -> Fleet {
        self.bin = Some(bin);
        self
    }

    /// The temporary folder (where fleet.toml lives).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A path inside the temporary folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The default state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.file(".fleet")
    }

    /// `fleet --config <path>` with this test's marker, ready for arguments.
    pub fn command(&self) -> Command {
        self.command_with_config(&self.config)
    }

    /// `fleet --config <config>` with this test's marker, run in the temporary folder: for a
    /// second config file beside fleet.toml.
    pub fn command_with_config(&self, config: &Path) -> Command {
        let mut c = Command::new(self.bin.clone().unwrap_or_else(fleet_bin));
        c.arg("--config")
            .arg(config)
            .env(MARKER_VAR, &self.marker)
            .env_remove("FLEET_CONFIG")
            .env_remove("FAILPOINTS")
            .current_dir(self.path());
        c
    }

    /// Runs `fleet --config <path> ARGS...` to the end.
    pub fn cmd(&self, args: &[&str]) -> Output {
        let mut c = self.command();
        c.args(args);
        run_with_deadline(c, CMD_DEADLINE)
    }

    /// Like [`Fleet::cmd`], asserting exit status 0; returns stdout.
    pub fn cmd_ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args);
        assert_eq!(
            out.code(),
            Some(0),
            "fleet {args:?} failed:\nstdout: {}\nstderr: {}",
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// `fleet enqueue PROJECT`: the new run's id.
    pub fn enqueue(&self, project: &str) -> i64 {
        let out = self.cmd_ok(&["enqueue", project]);
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("enqueue {project}: stdout is not a run id: {out:?}"))
    }

    /// `fleet runs --json --limit 100000`.
    pub fn runs(&self) -> Vec<Value> {
        self.runs_with(&[])
    }

    /// `fleet runs --json --limit 100000 EXTRA...`.
    pub fn runs_with(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["runs", "--json", "--limit", "100000"];
        args.extend_from_slice(extra);
        let out = self.cmd_ok(&args);
        match serde_json::from_str::<Value>(&out) {
            Ok(Value::Array(v)) => v,
            other => panic!("`fleet runs --json` is not a JSON array: {other:?}\n{out}"),
        }
    }

    /// One run, as `fleet runs --json` shows it.
    pub fn run(&self, id: i64) -> Value {
        self.runs()
            .into_iter()
            .find(|r| r["id"].as_i64() == Some(id))
            .unwrap_or_else(|| panic!("run {id} is not in `fleet runs --json`"))
    }

    /// `fleet status --json`, whatever the daemon's state: it exits 0 (running), 1 (stuck) or
    /// 3 (no daemon) with the same report; any other exit status fails the test.
    pub fn status(&self) -> Value {
        let out = self.cmd(&["status", "--json"]);
        assert!(
            matches!(out.code(), Some(0 | 1 | 3)),
            "fleet status --json failed: {out:?}"
        );
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("`fleet status --json` is not JSON ({e}): {}", out.stdout))
    }

    /// `fleet logs ID` (asserting success).
    pub fn logs(&self, id: i64) -> String {
        self.cmd_ok(&["logs", &id.to_string()])
    }

    /// Polls `cond` every ~25 ms until it holds; panics after `deadline` with `what`, the runs
    /// table and the daemons' stderr.
    pub fn wait_until(&self, deadline: Duration, what: &str, cond: impl FnMut() -> bool) {
        wait_for(deadline, POLL, what, cond, || self.diagnostics());
    }

    /// Waits until run `id` has a status `pred` accepts; returns the run.
    pub fn wait_run(&self, id: i64, what: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        self.wait_until(DEADLINE, &format!("run {id}: {what}"), || {
            last = self.run(id);
            pred(&last)
        });
        last
    }

    /// Waits until run `id` is in `status`; returns the run.
    pub fn wait_status(&self, id: i64, status: &str) -> Value {
        self.wait_run(id, &format!("status {status}"), |r| r["status"] == status)
    }

    /// Waits until run `id` has ended (any terminal status); returns the run.
    pub fn wait_terminal(&self, id: i64) -> Value {
        self.wait_run(id, "a terminal status", is_terminal)
    }

    /// The runs table and the daemons' stderr, for failure messages. Never panics.
    pub fn diagnostics(&self) -> String {
        let mut s = String::new();
        let mut c = self.command();
        c.args(["runs", "--limit", "60"]);
        c.stdin(Stdio::null());
        match c.output() {
            Ok(o) => {
                s += "--- fleet runs ---\n";
                s += &String::from_utf8_lossy(&o.stdout);
                s += &String::from_utf8_lossy(&o.stderr);
            }
            Err(e) => s += &format!("(fleet runs failed: {e})\n"),
        }
        for n in 0..self.daemons.load(Ordering::SeqCst) {
            let p = self.file(&format!("daemon-{n}.stderr"));
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            s += &format!("\n--- daemon {n} stderr (last {} lines) ---\n", tail.len());
            s += &tail.join("\n");
        }
        s
    }

    /// Kills (SIGKILL) every process still carrying this test's marker: shims, commands, their
    /// children, a daemon. Repeats until none is left (a dying shim's command may still be
    /// forking). Other tests' processes carry other markers and are left alone.
    pub fn kill_leftovers(&self) {
        let me = std::process::id() as i32;
        for _ in 0..100 {
            let pids: Vec<i32> = marked_pids(&self.marker)
                .into_iter()
                .filter(|&p| p != me)
                .collect();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                // It may have exited since it was listed: the next round looks again.
                let _ = send_signal(pid, Signal::KILL);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.kill_leftovers();
    }
}

/// Whether a run's status (in `fleet runs --json`) is terminal.
pub fn is_terminal(run: &Value) -> bool {
    matches!(
        run["status"].as_str(),
        Some("succeeded" | "failed" | "timed_out" | "cancelled" | "lost")
    )
}

/// A run's status as `fleet runs --json` shows it (`"?"` when missing).
pub fn status_of(r: &Value) -> &str {
    r["status"].as_str().unwrap_or("?")
}

/// Asserts `fleet check` exits 0, printing what it found and the diagnostics otherwise.
pub fn assert_check_ok(f: &Fleet) {
    let out = f.cmd(&["check", "--json"]);
    assert_eq!(
        out.code(),
        Some(0),
        "fleet check found violations:\nstdout: {}\nstderr: {}\n{}",
        out.stdout,
        out.stderr,
        f.diagnostics()
    );
}
