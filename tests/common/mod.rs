//! Harness for the end-to-end tests: drives the real `fleet` binary and real processes.
//!
//! Every test gets a [`Fleet`]: a temporary folder holding a `fleet.toml` the test writes (the
//! state directory defaults to `.fleet` inside it). Every process the harness starts carries
//! `FLEET_E2E_MARKER=<unique>` in its environment; the daemon passes its environment on to the
//! shims and the commands, so when the [`Fleet`] is dropped every leftover process of *this* test
//! (and no other test's) is found through `/proc/<pid>/environ` and killed.
//!
//! Synchronisation is by polling a condition with a deadline ([`Fleet::wait_until`]), never by
//! sleeping a fixed time.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The environment variable that marks every process started for one test.
pub const MARKER_VAR: &str = "FLEET_E2E_MARKER";

/// How long a polled condition may take before the test fails. Generous: CI is a noisy 2-core VM.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How long a single `fleet` command (not the daemon) may take before the test fails.
pub const CMD_DEADLINE: Duration = Duration::from_secs(60);

const POLL: Duration = Duration::from_millis(25);

/// The `fleet` binary built next to this test: the test executable is
/// `target/<profile>/deps/<test>-<hash>`, the binary `target/<profile>/fleet`.
/// `FLEET_BIN` overrides it.
pub fn fleet_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FLEET_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe
        .parent()
        .expect("test executable has a folder")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join("fleet");
    if !bin.is_file() {
        panic!(
            "the fleet binary is missing at {}: build it first (`cargo build -p fleet`, or run the \
             tests with `cargo test --workspace --all-features` / `cargo nextest run --workspace \
             --all-features`, which build it), or point FLEET_BIN at it",
            bin.display()
        );
    }
    bin
}

/// A string as a TOML basic string (JSON string escapes are valid TOML escapes).
pub fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// An argv as a TOML array.
pub fn toml_argv(argv: &[&str]) -> String {
    format!(
        "[{}]",
        argv.iter()
            .map(|a| toml_str(a))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `sh -c SCRIPT` as a TOML array.
pub fn sh(script: &str) -> String {
    toml_argv(&["sh", "-c", script])
}

/// What a finished `fleet` command left.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// The exit code (`None` if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// Runs `cmd` to the end, capturing its output; kills it and panics after `deadline`.
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

/// One test's fleet: a temporary folder with a `fleet.toml`.
pub struct Fleet {
    dir: tempfile::TempDir,
    /// The config file (absolute).
    pub config: PathBuf,
    /// This test's marker value (see [`MARKER_VAR`]).
    pub marker: String,
    daemons: AtomicU64,
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
        };
        fleet.write_config(&toml(fleet.path()));
        fleet
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

    /// Replaces fleet.toml.
    pub fn write_config(&self, toml: &str) {
        std::fs::write(&self.config, toml).expect("write fleet.toml");
    }

    /// `fleet --config <path>` with this test's marker, ready for arguments.
    pub fn command(&self) -> Command {
        let mut c = Command::new(fleet_bin());
        c.arg("--config")
            .arg(&self.config)
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

    /// `fleet status --json`.
    pub fn status(&self) -> Value {
        let out = self.cmd_ok(&["status", "--json"]);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("`fleet status --json` is not JSON ({e}): {out}"))
    }

    /// `fleet logs ID` (asserting success).
    pub fn logs(&self, id: i64) -> String {
        self.cmd_ok(&["logs", &id.to_string()])
    }

    /// Starts `fleet daemon` and waits until it holds the state directory (`fleet status` says
    /// running with its pid). Its stderr goes to `daemon-<n>.stderr` in the temporary folder.
    pub fn start_daemon(&self) -> Daemon<'_> {
        self.start_daemon_env(&[])
    }

    /// [`Fleet::start_daemon`] with extra environment variables for the daemon.
    pub fn start_daemon_env(&self, env: &[(&str, &str)]) -> Daemon<'_> {
        let n = self.daemons.fetch_add(1, Ordering::SeqCst);
        let stderr_path = self.file(&format!("daemon-{n}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).expect("daemon stderr file");
        let stdout = stderr.try_clone().unwrap();
        let mut c = self.command();
        // Stdin is a pipe this harness keeps open: a command that inherited it by mistake would
        // block reading it instead of seeing /dev/null's end of file.
        c.arg("daemon")
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr);
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("cannot start fleet daemon");
        let stdin = child.stdin.take();
        let mut daemon = Daemon {
            fleet: self,
            child,
            _stdin: stdin,
            stderr_path,
            exited: None,
        };
        let pid = daemon.pid();
        self.wait_until(DEADLINE, "the daemon to hold the state directory", || {
            if let Some(st) = daemon.try_exit() {
                panic!("fleet daemon exited at start ({st}):\n{}", daemon.stderr());
            }
            let s = self.status();
            s["daemon"]["running"] == Value::Bool(true)
                && s["daemon"]["pid"].as_i64() == Some(pid as i64)
                // The control socket is bound just after the lock is taken; nudges (`reload`,
                // `cancel`) need it.
                && s["state_dir"]
                    .as_str()
                    .is_some_and(|d| Path::new(d).join("daemon.sock").exists())
        });
        daemon
    }

    /// Polls `cond` every ~25 ms until it holds; panics after `deadline` with `what`, the runs
    /// table and the daemons' stderr.
    pub fn wait_until(&self, deadline: Duration, what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        loop {
            if cond() {
                return;
            }
            if start.elapsed() > deadline {
                panic!(
                    "timed out after {deadline:?} waiting for {what}\n{}",
                    self.diagnostics()
                );
            }
            std::thread::sleep(POLL);
        }
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
                // SAFETY: plain kill(2) on a pid just found with our marker.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
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

/// Every pid in /proc right now (empty if /proc cannot be read).
pub fn all_pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect()
}

/// Whether `pid` is a daemon's fork server (crates/supervisor/src/forkserver.rs names itself
/// `fleet-forksrv`): it lives exactly as long as its daemon and is no run's process.
pub fn is_fork_server(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "fleet-forksrv")
}

/// The run a shim process serves: `fleet shim ... --run-id N ...` when exec'd, or named
/// `shim-N` when forked by the fork server. `None` for any other process.
pub fn shim_run_id(pid: i32) -> Option<i64> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    if let Some(id) = comm.trim().strip_prefix("shim-") {
        return id.parse().ok();
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if args.get(1).map(String::as_str) != Some("shim") {
        return None;
    }
    let i = args.iter().position(|a| a == "--run-id")?;
    args.get(i + 1)?.parse().ok()
}

/// Pids of live (non-zombie) processes whose environment holds `MARKER_VAR=marker`.
pub fn marked_pids(marker: &str) -> Vec<i32> {
    let needle = format!("{MARKER_VAR}={marker}");
    let needle = needle.as_bytes();
    let mut out = Vec::new();
    for pid in all_pids() {
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|var| var == needle) {
            out.push(pid);
        }
    }
    out
}

/// A running `fleet daemon`. Dropping it kills it (SIGKILL) and reaps it; the [`Fleet`]'s drop
/// then kills whatever shims and commands are left.
pub struct Daemon<'a> {
    fleet: &'a Fleet,
    child: Child,
    _stdin: Option<std::process::ChildStdin>,
    stderr_path: PathBuf,
    exited: Option<ExitStatus>,
}

impl Daemon<'_> {
    /// The daemon's pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its exit status if it has exited (reaped).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().expect("try_wait on the daemon");
        }
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
            // SAFETY: our own unreaped child: its pid cannot have been reused.
            unsafe {
                libc::kill(self.pid(), libc::SIGKILL);
            }
            self.exited = Some(self.child.wait().expect("wait on the daemon"));
        }
    }

    /// What the daemon wrote on stderr (and stdout) so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
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

/// Whether a run's status (in `fleet runs --json`) is terminal.
pub fn is_terminal(run: &Value) -> bool {
    matches!(
        run["status"].as_str(),
        Some("succeeded" | "failed" | "timed_out" | "cancelled" | "lost")
    )
}

/// The process state letter from /proc/<pid>/stat (`None` if there is no such process).
fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid pgrp ...": comm may contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Whether process `pid` is gone: `kill(pid, 0)` says ESRCH, or it is only a zombie left for
/// init to reap (in a container, pid 1 may never reap it).
pub fn process_gone(pid: i32) -> bool {
    assert!(pid > 0, "bad pid {pid}");
    // SAFETY: signal 0 only checks for existence.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return true;
    }
    matches!(proc_state(pid), None | Some(('Z' | 'X' | 'x', _)))
}

/// Live (non-zombie) processes in process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for pid in all_pids() {
        if let Some((state, pgrp)) = proc_state(pid) {
            if pgrp == pgid && !matches!(state, 'Z' | 'X' | 'x') {
                out.push(pid);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Recording commands and the overlap sweep.

/// A shell script for a recording command: appends `start <ns> <project> <run_id> <ns-time>` to
/// `rec`, prints `hello run <run_id>`, sleeps `sleep` seconds, appends `end ...`. Appends of such
/// short lines are atomic. The timestamps are taken inside the command's lifetime, so the
/// recorded intervals can only under-state overlap, never invent it.
pub fn recorder_script(rec: &Path, sleep: &str) -> String {
    let rec = rec.display().to_string();
    assert!(!rec.contains('\''), "record path must not contain a quote");
    format!(
        "echo start $FLEET_NAMESPACE $FLEET_PROJECT $FLEET_RUN_ID $(date +%s%N) >> '{rec}'; \
         echo hello run $FLEET_RUN_ID; \
         sleep {sleep}; \
         echo end $FLEET_NAMESPACE $FLEET_PROJECT $FLEET_RUN_ID $(date +%s%N) >> '{rec}'"
    )
}

/// One line of a record file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub start: bool,
    pub namespace: String,
    pub project: String,
    pub run_id: i64,
    /// Nanoseconds since the epoch.
    pub at: u128,
}

/// Parses a record file (panics on a malformed line).
pub fn read_records(path: &Path) -> Vec<Record> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read records {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "malformed record line {l:?}");
            Record {
                start: match f[0] {
                    "start" => true,
                    "end" => false,
                    other => panic!("malformed record kind {other:?} in {l:?}"),
                },
                namespace: f[1].to_string(),
                project: f[2].to_string(),
                run_id: f[3]
                    .parse()
                    .unwrap_or_else(|_| panic!("bad run id in {l:?}")),
                at: f[4]
                    .parse()
                    .unwrap_or_else(|_| panic!("bad timestamp in {l:?}")),
            }
        })
        .collect()
}

/// The most runs simultaneously active, from start/end records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overlap {
    pub global: usize,
    pub per_namespace: BTreeMap<String, usize>,
    pub per_project: BTreeMap<String, usize>,
}

/// Sweeps the records in time order (an end at the same instant as a start counts first). A
/// start without an end counts as active until the end of time. Panics if a run id has more than
/// one start or end, or an end without a start.
pub fn max_overlap(records: &[Record]) -> Overlap {
    try_max_overlap(records).unwrap_or_else(|e| panic!("{e}"))
}

/// [`max_overlap`], with `Err` for a run started or ended twice, or ended without a start.
pub fn try_max_overlap(records: &[Record]) -> Result<Overlap, String> {
    let mut starts: BTreeMap<i64, usize> = BTreeMap::new();
    let mut ends: BTreeMap<i64, usize> = BTreeMap::new();
    for r in records {
        *if r.start { &mut starts } else { &mut ends }
            .entry(r.run_id)
            .or_default() += 1;
    }
    for (id, n) in &starts {
        if *n != 1 {
            return Err(format!("run {id} started {n} times: {records:#?}"));
        }
    }
    for (id, n) in &ends {
        if *n != 1 {
            return Err(format!("run {id} ended {n} times: {records:#?}"));
        }
        if !starts.contains_key(id) {
            return Err(format!("run {id} ended without starting: {records:#?}"));
        }
    }
    let mut events: Vec<&Record> = records.iter().collect();
    // Ends (start == false) sort before starts at the same instant.
    events.sort_by_key(|r| (r.at, r.start));
    let mut out = Overlap::default();
    let mut global = 0usize;
    let mut ns: BTreeMap<String, usize> = BTreeMap::new();
    let mut pr: BTreeMap<String, usize> = BTreeMap::new();
    for r in events {
        let n = ns.entry(r.namespace.clone()).or_default();
        let p = pr.entry(r.project.clone()).or_default();
        if r.start {
            global += 1;
            *n += 1;
            *p += 1;
        } else {
            global -= 1;
            *n -= 1;
            *p -= 1;
        }
        out.global = out.global.max(global);
        let m = out.per_namespace.entry(r.namespace.clone()).or_default();
        *m = (*m).max(*n);
        let m = out.per_project.entry(r.project.clone()).or_default();
        *m = (*m).max(*p);
    }
    Ok(out)
}

impl Overlap {
    /// `Err` naming the first cap exceeded: the global cap, a namespace's (`caps`), or one
    /// active run per project.
    pub fn check(&self, global: usize, caps: &[(&str, usize)]) -> Result<(), String> {
        if self.global > global {
            return Err(format!("global cap {global} exceeded: {self:?}"));
        }
        for (ns, cap) in caps {
            let seen = self.per_namespace.get(*ns).copied().unwrap_or(0);
            if seen > *cap {
                return Err(format!(
                    "namespace {ns} cap {cap} exceeded ({seen}): {self:?}"
                ));
            }
        }
        for (p, n) in &self.per_project {
            if *n > 1 {
                return Err(format!("project {p} had {n} runs at once: {self:?}"));
            }
        }
        Ok(())
    }
}
