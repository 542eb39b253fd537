//! The shim: a tiny per-run monitor (`fleet shim ARGS...`, hidden) that owns one run's command,
//! outlives a daemon crash, and records the command's exit status in the run folder.
//!
//! The daemon starts the shim in its own session with stdout a pipe to the daemon, stderr
//! inherited, and the command's environment already set. The shim (brief, "Restart contract"):
//!
//! 1. blocks SIGCHLD, SIGTERM, SIGINT and SIGHUP before anything else, so that none is lost
//!    (they are consumed synchronously with `sigtimedwait`; no handlers, no threads);
//! 2. takes the run's lock (an exclusive `flock`, held for life: the kernel drops it when the
//!    shim dies, so a free lock proves the shim gone);
//! 3. checks the tombstones right after locking: recovery may have given the claim up while this
//!    shim was late, and then the command must not start;
//! 4. durably writes `started` before spawning, so "never started" can be proven;
//! 5. spawns the command in its own process group, with a parent-death signal (SIGKILL), stdin
//!    `/dev/null`, stdout and stderr appended to the run's log;
//! 6. writes `running`, tells the daemon `running <pid>` on stdout;
//! 7. waits, passing termination requests on to the process group, enforcing the timeout and
//!    the kill grace;
//! 8. kills whatever is left of the process group, durably writes `exit`, and only then exits
//!    (releasing the lock).
//!
//! The shim is single-threaded and must stay so: the parent-death signal is tied to the *thread*
//! that forked the command, so a thread that forked and then ended would kill the command early,
//! and a signal mask only protects the thread that set it. [`main`] runs before any tokio runtime
//! exists; nothing here starts a thread.
//!
//! [`FAILPOINTS`] lists the points where tests inject crashes (feature `failpoints`, configured
//! by the `FAILPOINTS` environment variable) and what recovery must do after each.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::runfiles::{
    now_rfc3339, proc_start_time, ExitRecord, Outcome, RunDir, RunLock, RunningRecord,
    StartedRecord,
};

/// The shim's failpoints, each with what recovery must conclude when the shim crashes there.
/// Every name here is a `fail_point!` in the shim and vice versa (a unit test checks both ways);
/// docs describing recovery must match this register.
pub const FAILPOINTS: &[(&str, &str)] = &[
    (
        "shim-before-lock",
        "no lock taken, nothing written: lock free and no started record for the token \
         => recovery locks, tombstones the token, requeues the same attempt; \
         with a sleep here the late shim must find the tombstone and not start",
    ),
    (
        "shim-after-lock",
        "lock taken (released by the crash), nothing written: lock free and no started record \
         => tombstone the token, requeue the same attempt",
    ),
    (
        "shim-before-started",
        "tombstones checked, started not written: lock free and no started record \
         => tombstone the token, requeue the same attempt",
    ),
    (
        "shim-after-started",
        "started durable, command not yet spawned: lock free, started but no exit record \
         => the command may have started: lost (retried only if retries remain)",
    ),
    (
        "shim-after-exit",
        "command and its process group gone, exit record not written: lock free, started but \
         no exit record => lost",
    ),
    (
        "shim-before-exit-file",
        "command gone, exit record not written: lock free, started but no exit record => lost",
    ),
    (
        "shim-after-exit-file",
        "exit record durable: lock free and exit record for the token \
         => finalize the run with the real status from the exit record",
    ),
];

/// A failpoint that simulates a crash: `FAILPOINTS=name=return` aborts the process there,
/// `FAILPOINTS=name=sleep(3000)` delays it. Compiles to nothing without the `failpoints` feature.
macro_rules! crash_point {
    ($name:literal) => {
        fail::fail_point!($name, |_| { std::process::abort() })
    };
}

/// Process exit status of the shim when it ran to the end (the command's own status is in the
/// `exit` record), or when the claim was tombstoned.
const EXIT_OK: i32 = 0;
/// Process exit status when the shim could not do its job (lock, records) — recovery reads the
/// run folder to learn what happened.
const EXIT_FAILED: i32 = 1;
/// Process exit status for bad arguments.
const EXIT_USAGE: i32 = 2;

/// The signals the shim blocks from its first instruction and consumes with `sigtimedwait`.
const SHIM_SIGNALS: [libc::c_int; 4] = [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Everything a shim needs to run one claim of one run; what follows `fleet shim` on its
/// command line ([`ShimArgs::to_args`] / [`ShimArgs::from_args`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimArgs {
    /// The state directory; the run folder is `<state_dir>/runs/<run_id>/`.
    pub state_dir: PathBuf,
    /// The run's id.
    pub run_id: i64,
    /// The claim's token (the daemon increments it per claim); stamped on every record, and
    /// checked against the tombstones.
    pub token: u64,
    /// How long the command may run before the shim terminates its process group; `None` for
    /// no limit. Measured on the monotonic clock from the spawn.
    pub timeout: Option<Duration>,
    /// How long after SIGTERM the shim waits before SIGKILL.
    pub kill_grace: Duration,
    /// The command's working directory.
    pub cwd: PathBuf,
    /// The command: program and arguments, no shell. Never empty.
    pub argv: Vec<OsString>,
    /// Changes to the command's environment, applied in order on top of the shim's own:
    /// `Some(value)` sets a variable, `None` removes it. Not part of [`ShimArgs::to_args`]:
    /// a command line is world-readable (`ps`), an environment is not, and project env may hold
    /// secrets. A shim started with `fleet shim` gets them as its own environment instead (and
    /// this list is empty); a shim forked by the fork server gets them here.
    pub env: Vec<(OsString, Option<OsString>)>,
}

impl ShimArgs {
    /// The arguments that follow `fleet shim`:
    /// `--state-dir P --run-id N --token T [--timeout D] --kill-grace D --cwd P -- ARGV...`,
    /// where durations are written `SECONDS.NANOSECONDS` (nine digits) so they round-trip
    /// exactly. Paths and argv are passed as they are (non-UTF-8 included).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![
            "--state-dir".into(),
            self.state_dir.clone().into_os_string(),
            "--run-id".into(),
            self.run_id.to_string().into(),
            "--token".into(),
            self.token.to_string().into(),
        ];
        if let Some(t) = self.timeout {
            out.push("--timeout".into());
            out.push(format_duration(t).into());
        }
        out.push("--kill-grace".into());
        out.push(format_duration(self.kill_grace).into());
        out.push("--cwd".into());
        out.push(self.cwd.clone().into_os_string());
        out.push("--".into());
        out.extend(self.argv.iter().cloned());
        out
    }

    /// Parses what [`ShimArgs::to_args`] produced (options in any order, each at most once).
    ///
    /// Errors: a message naming the problem — unknown or repeated option, missing value, bad
    /// number or duration, missing required option, missing `--` or empty command. Never panics.
    pub fn from_args(args: &[OsString]) -> Result<ShimArgs, String> {
        let mut state_dir = None;
        let mut run_id = None;
        let mut token = None;
        let mut timeout = None;
        let mut kill_grace = None;
        let mut cwd = None;
        let mut argv = None;
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let name = arg
                .to_str()
                .ok_or_else(|| format!("unexpected argument {arg:?}"))?;
            if name == "--" {
                argv = Some(it.by_ref().cloned().collect::<Vec<_>>());
                break;
            }
            let value = it
                .next()
                .ok_or_else(|| format!("missing value for {name}"))?;
            match name {
                "--state-dir" => set_once(&mut state_dir, name, PathBuf::from(value))?,
                "--run-id" => set_once(&mut run_id, name, parse_number::<i64>(name, value)?)?,
                "--token" => set_once(&mut token, name, parse_number::<u64>(name, value)?)?,
                "--timeout" => set_once(&mut timeout, name, parse_duration(name, value)?)?,
                "--kill-grace" => set_once(&mut kill_grace, name, parse_duration(name, value)?)?,
                "--cwd" => set_once(&mut cwd, name, PathBuf::from(value))?,
                _ => return Err(format!("unknown option {name}")),
            }
        }
        let argv = argv.ok_or("missing `--` before the command")?;
        if argv.is_empty() {
            return Err("empty command after `--`".into());
        }
        Ok(ShimArgs {
            state_dir: state_dir.ok_or("missing --state-dir")?,
            run_id: run_id.ok_or("missing --run-id")?,
            token: token.ok_or("missing --token")?,
            timeout,
            kill_grace: kill_grace.ok_or("missing --kill-grace")?,
            cwd: cwd.ok_or("missing --cwd")?,
            argv,
            env: Vec::new(),
        })
    }
}

/// Runs the shim for the arguments that follow `fleet shim`, and returns the process exit status
/// to use: 0 when the command's fate is recorded in the `exit` record (whatever the command's
/// own status) or when the claim was tombstoned; 1 when the shim could not do its job (it says
/// why on stderr; recovery reads the run folder); 2 for bad arguments.
///
/// Never returns before the `exit` record is durable, except for a tombstoned claim (nothing was
/// started), setup failures (the lock, the tombstones, the `started` record: nothing was started
/// either), and a failure to write the `exit` record itself (after the command and its group are
/// gone; recovery then sees `started` without `exit` and calls the run lost).
///
/// Must be called on the process's only thread, before any async runtime or other thread
/// exists: the parent-death signal follows the thread that forked the command, and the signal
/// mask set here protects only this thread.
pub fn main(args: &[OsString]) -> i32 {
    // First of all, so that no termination request or child exit is lost before the wait loop.
    let signals = match block_shim_signals() {
        Ok(set) => set,
        Err(e) => {
            warn(format_args!("fleet shim: could not block signals: {e}"));
            return EXIT_FAILED;
        }
    };
    let args = match ShimArgs::from_args(args) {
        Ok(a) => a,
        Err(m) => {
            warn(format_args!("fleet shim: bad arguments: {m}"));
            return EXIT_USAGE;
        }
    };
    // Whatever the daemon inherited and did not mark close-on-exec (a service manager's or a
    // test harness's descriptors) would otherwise reach every command.
    if let Err(e) = close_inherited_descriptors() {
        warn(format_args!(
            "fleet shim: could not close inherited descriptors: {e}"
        ));
        return EXIT_FAILED;
    }
    // Keep the scenario alive for the shim's whole life: it holds the failpoint configuration.
    let _scenario = match failpoint_scenario() {
        Ok(s) => s,
        Err(_) => {
            warn(format_args!("fleet shim: invalid FAILPOINTS"));
            return EXIT_USAGE;
        }
    };
    supervise_claim(&args, &signals)
}

/// The shim in a process the fork server has just forked (see [`crate::forkserver`]): the same
/// work as [`main`], without an exec of the fleet binary (which costs more CPU than the command
/// of a short run). Returns the process exit status, as [`main`] does.
///
/// The fork server leaves the new process as a copy of itself, so this first undoes what a
/// fresh exec would have given: signal dispositions back to their defaults (the server ignores
/// SIGCHLD, so that the kernel reaps its children — a shim that kept that could not wait for its
/// command — and the termination signals, which `sigtimedwait` could then never see), its own
/// session, stdin `/dev/null`, `report` as stdout (the pipe the daemon reads `running PID` from
/// and whose end-of-file tells it the shim is gone), and no other descriptor open.
///
/// Failpoints are the fork server's (it set them up; the forked copy has them already).
///
/// Must be called in the forked child only, before anything else, on its only thread.
pub fn main_forked(args: &ShimArgs, report: std::os::fd::OwnedFd) -> i32 {
    use std::os::fd::IntoRawFd;
    let signals = match block_shim_signals() {
        Ok(set) => set,
        Err(e) => {
            warn(format_args!("fleet shim: could not block signals: {e}"));
            return EXIT_FAILED;
        }
    };
    let report = report.into_raw_fd();
    // SAFETY: single-threaded child of a fork; plain system calls on descriptors we own.
    let setup = unsafe {
        // Blocked first, so a termination request arriving now waits for the loop below.
        default_signal_dispositions();
        // `ps` and `top` show `shim-<run id>` (at most 15 bytes: longer ids are cut).
        let mut name = format!("shim-{}", args.run_id).into_bytes();
        name.truncate(15);
        name.push(0);
        libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0);
        let run_id = args.run_id.to_string();
        crate::forkserver::set_command_line(&["fleet", "shim", "--run-id", &run_id]);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        libc::setsid() >= 0
            && null >= 0
            && libc::dup2(null, 0) == 0
            && (report == 1 || libc::dup2(report, 1) == 1)
    };
    // Everything else the server had (its socket, the received descriptor) goes now: a command
    // must never inherit the daemon's pipes.
    let setup = setup && close_inherited_descriptors().is_ok();
    if !setup {
        warn(format_args!(
            "fleet shim: run {} claim {}: could not set up the forked shim: {}",
            args.run_id,
            args.token,
            io::Error::last_os_error()
        ));
        return EXIT_FAILED;
    }
    supervise_claim(args, &signals)
}

/// What [`main`] and [`main_forked`] share once signals are blocked and arguments known.
fn supervise_claim(args: &ShimArgs, signals: &libc::sigset_t) -> i32 {
    // Writing `running <pid>` to a dead daemon's pipe must fail, not kill the shim. Rust already
    // ignores SIGPIPE in its binaries; this keeps it true whoever embeds the shim.
    // SAFETY: setting a signal disposition, single-threaded.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    match run(args, signals) {
        Ok(status) => status,
        Err(e) => {
            warn(format_args!(
                "fleet shim: run {} claim {}: {e}",
                args.run_id, args.token
            ));
            EXIT_FAILED
        }
    }
}

use crate::failpoints::scenario as failpoint_scenario;

fn run(a: &ShimArgs, signals: &libc::sigset_t) -> io::Result<i32> {
    crash_point!("shim-before-lock");
    let dir = RunDir::new(&a.state_dir, a.run_id);
    dir.create()?;
    let lock = dir.lock_blocking()?;
    crash_point!("shim-after-lock");

    // Right after the lock, before anything else: recovery tombstones a claim only while holding
    // this lock, so either it did so before we locked (we see it here) or it will find our
    // `started` record and not requeue. Without this check a late shim starts a requeued run a
    // second time.
    if dir.is_tombstoned(a.token)? {
        warn(format_args!(
            "fleet shim: run {} claim {} was given up by recovery; not starting",
            a.run_id, a.token
        ));
        return Ok(EXIT_OK);
    }

    crash_point!("shim-before-started");
    let shim_pid = std::process::id() as i32;
    // Earlier claims' starts stay on record (see `StartedRecord::history`).
    let mut history = match dir.read_started() {
        Ok(Some(old)) if old.history.is_empty() => vec![old.token],
        Ok(Some(old)) => old.history,
        _ => Vec::new(),
    };
    history.push(a.token);
    let started = StartedRecord {
        token: a.token,
        shim_pid,
        shim_start_time: proc_start_time(shim_pid).unwrap_or(0),
        at: now_rfc3339(),
        history,
    };
    // Durable before the spawn: the claim is only "maybe started" once this is on disk.
    dir.write_started(&lock, &started)?;
    crash_point!("shim-after-started");

    let mut child = match spawn_command(a, &dir, shim_pid) {
        Ok(child) => child,
        Err(message) => {
            // Best effort: the log is where operators look; the exit record is what counts.
            if let Ok(mut log) = dir.open_log() {
                let _ = writeln!(log, "{message}");
            }
            let record = ExitRecord {
                token: a.token,
                outcome: Outcome::SpawnFailed,
                code: None,
                signal: None,
                timed_out: false,
                term_requested: false,
                error: Some(message),
                started_at: None,
                finished_at: now_rfc3339(),
            };
            write_exit(&dir, &lock, &record)?;
            return Ok(EXIT_OK);
        }
    };
    let spawned = Instant::now();
    let pid = child.id() as i32;
    let started_at = now_rfc3339();
    let running = RunningRecord {
        token: a.token,
        pid,
        at: started_at.clone(),
    };
    if let Err(e) = dir.write_running(&lock, &running) {
        // Not fatal: the command runs and must still be supervised and its status recorded.
        warn(format_args!(
            "fleet shim: run {} claim {}: could not write the running record: {e}",
            a.run_id, a.token
        ));
    }
    {
        // The daemon may be dead; then the write fails (SIGPIPE is ignored) and that is fine.
        let mut out = io::stdout().lock();
        let _ = writeln!(out, "running {pid}");
        let _ = out.flush();
    }

    let ended = supervise(&mut child, a, spawned, signals)?;
    crash_point!("shim-after-exit");

    let (outcome, code, signal) = match (ended.status.code(), ended.status.signal()) {
        (Some(code), _) => (Outcome::Exited, Some(code), None),
        (None, Some(sig)) => (Outcome::Signalled, None, Some(sig)),
        // wait(2) reports only exits and deaths by signal; kept total rather than panicking.
        (None, None) => (Outcome::Exited, None, None),
    };
    let record = ExitRecord {
        token: a.token,
        outcome,
        code,
        signal,
        timed_out: ended.timed_out,
        term_requested: ended.term_requested,
        error: None,
        started_at: Some(started_at),
        finished_at: ended.finished_at,
    };
    write_exit(&dir, &lock, &record)?;
    // Only now may the lock go (on return): a free lock with an exit record means "finalize".
    drop(lock);
    Ok(EXIT_OK)
}

fn write_exit(dir: &RunDir, lock: &RunLock, record: &ExitRecord) -> io::Result<()> {
    crash_point!("shim-before-exit-file");
    dir.write_exit(lock, record)?;
    crash_point!("shim-after-exit-file");
    Ok(())
}

/// Spawns the command. `Err` carries the one-line message for the log and the exit record.
fn spawn_command(a: &ShimArgs, dir: &RunDir, shim_pid: i32) -> Result<Child, String> {
    let log = dir.open_log().map_err(|e| {
        format!(
            "fleet: could not open the run's log {}: {e}",
            dir.log_path().display()
        )
    })?;
    let log_err = log
        .try_clone()
        .map_err(|e| format!("fleet: could not duplicate the run's log descriptor: {e}"))?;
    let mut cmd = Command::new(&a.argv[0]);
    cmd.args(&a.argv[1..])
        .current_dir(&a.cwd)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Its own process group, so that a timeout or cancel reaches the command's children
        // too (kill(-pgid)), and so that the group can be swept after the command ends.
        .process_group(0);
    for (key, value) in &a.env {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    // The failpoint configuration is the shim's, not the command's (last, so that the exec'd
    // and the forked shim treat it alike).
    cmd.env_remove("FAILPOINTS");
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // calls (sigemptyset, sigprocmask, signal, prctl, getppid, _exit; SIGRTMIN reads a value
    // glibc fixed at startup).
    unsafe {
        cmd.pre_exec(move || {
            // std resets SIGPIPE to its default before exec but NOT the signal mask (verified
            // with Rust 1.95: a `sleep` spawned from the shim had SIGTERM and SIGCHLD blocked and
            // ignored a cancel). Shells unblock at startup, other programs do not, so the mask
            // the shim set for sigtimedwait is cleared here. SIGPIPE is reset too, in case std
            // ever stops doing it. Test: `command_starts_with_a_clean_signal_state`.
            let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(empty.as_mut_ptr());
            libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            // Dispositions set to "ignore" survive exec too: a daemon started in the background
            // of a script (SIGINT, SIGQUIT ignored) would pass them to every command, which
            // then could not be stopped the usual way. Every command starts with the defaults.
            default_signal_dispositions();
            // The command must not outlive the shim. Tied to the forking thread: the shim's
            // only thread, which lives as long as the shim.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The shim died between fork and prctl: the signal will never come, so go now.
            if libc::getppid() != shim_pid {
                libc::_exit(127);
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        format!(
            "fleet: could not start command {:?} in {}: {e}",
            a.argv,
            a.cwd.display()
        )
    })
}

/// What the wait loop learnt.
struct Ended {
    status: ExitStatus,
    timed_out: bool,
    term_requested: bool,
    finished_at: String,
}

/// Waits for the command, passing on termination requests and enforcing the timeout and kill
/// grace; then kills what is left of its process group and reaps it.
fn supervise(
    child: &mut Child,
    a: &ShimArgs,
    spawned: Instant,
    signals: &libc::sigset_t,
) -> io::Result<Ended> {
    let pgid = child.id() as i32;
    // `None` when there is no timeout, when it already fired, or when it is too far to express.
    let mut timeout_at = a.timeout.and_then(|t| spawned.checked_add(t));
    let mut terminating = false;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut timed_out = false;
    let mut term_requested = false;

    loop {
        if leader_exited(pgid)? {
            break;
        }
        let now = Instant::now();
        if timeout_at.is_some_and(|t| now >= t) {
            timeout_at = None;
            // A timeout that fires while a requested termination is under way changes nothing.
            if !terminating {
                timed_out = true;
                begin_termination(pgid, a.kill_grace, &mut terminating, &mut kill_at);
            }
        }
        if !killed && kill_at.is_some_and(|k| Instant::now() >= k) {
            killed = true;
            signal_group(pgid, libc::SIGKILL);
        }
        let next = [timeout_at, if killed { None } else { kill_at }]
            .into_iter()
            .flatten()
            .min();
        let wait = next.map(|d| d.saturating_duration_since(Instant::now()));
        // SIGCHLD, a deadline or an interruption need nothing here: the top of the loop looks
        // again at the command and the clock.
        if let Some(libc::SIGTERM | libc::SIGINT | libc::SIGHUP) = wait_signal(signals, wait) {
            term_requested = true;
            begin_termination(pgid, a.kill_grace, &mut terminating, &mut kill_at);
        }
    }
    let finished_at = now_rfc3339();
    // The leader is a zombie, not reaped: its pid, hence the group id, cannot be reused yet, so
    // this SIGKILL reaches only processes the command left in its group (e.g. a grandchild).
    signal_group(pgid, libc::SIGKILL);
    let status = child.wait()?;
    Ok(Ended {
        status,
        timed_out,
        term_requested,
        finished_at,
    })
}

/// Starts terminating the process group (SIGTERM now, SIGKILL once the grace is over), unless
/// that was already done: the first reason to terminate sets the kill deadline.
fn begin_termination(
    pgid: i32,
    kill_grace: Duration,
    terminating: &mut bool,
    kill_at: &mut Option<Instant>,
) {
    if !*terminating {
        *terminating = true;
        signal_group(pgid, libc::SIGTERM);
        // Too far to express means never: the command gets the whole grace it was given.
        *kill_at = Instant::now().checked_add(kill_grace);
    }
}

/// Whether the command has ended, without reaping it (WNOWAIT), so that its process group can
/// still be signalled safely afterwards.
fn leader_exited(pid: i32) -> io::Result<bool> {
    loop {
        let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
        // SAFETY: waitid writes into `info`, zero-initialised so that "no change" reads si_pid 0.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                info.as_mut_ptr(),
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r == 0 {
            // SAFETY: initialised (zeroed, then possibly filled by waitid).
            return Ok(unsafe { info.assume_init().si_pid() } != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends `sig` to the command's process group. ESRCH (nobody left) is expected and ignored.
fn signal_group(pgid: i32, sig: libc::c_int) {
    // SAFETY: plain kill(2). `pgid` is our unreaped child's pid, so it names our group.
    if unsafe { libc::kill(-pgid, sig) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            warn(format_args!(
                "fleet shim: could not send signal {sig} to process group {pgid}: {e}"
            ));
        }
    }
}

/// Waits for one of the blocked shim signals, at most `timeout` (forever if `None`). Returns the
/// signal, or `None` on timeout or interruption.
fn wait_signal(set: &libc::sigset_t, timeout: Option<Duration>) -> Option<libc::c_int> {
    let ts = timeout.map(|d| libc::timespec {
        // Capped at a day: the loop recomputes its deadlines after every wake-up anyway.
        tv_sec: d.as_secs().min(86_400) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `set` is initialised; a null siginfo pointer is allowed.
    let r = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), ts_ptr) };
    // -1 is EAGAIN (timeout) or EINTR: both mean "look again".
    (r > 0).then_some(r)
}

/// Closes every descriptor above stderr. Call only where nothing of this process's own is open
/// yet (the start of a shim). Errors: the system refused (the descriptors stay open).
fn close_inherited_descriptors() -> io::Result<()> {
    // SAFETY: closes descriptors this process does not use (see above).
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } == 0 {
        return Ok(());
    }
    // Kernels before 5.9 have no close_range: close what /proc lists.
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in open {
        // SAFETY: as above (the directory's own descriptor is already closed: EBADF is fine).
        unsafe { libc::close(fd) };
    }
    Ok(())
}

/// Sets every signal's disposition but SIGKILL's and SIGSTOP's to the default, the real-time
/// signals the C library reserves for itself (32 and 33 on Linux) included: an "ignore" there,
/// inherited from whoever started the daemon, would otherwise reach every command. Those two
/// are set with the raw system call, since the C library refuses to touch them; this process
/// makes no use of them (it is single-threaded and never cancels a thread or changes its ids).
///
/// Async-signal-safe (only `sigaction`/`rt_sigaction`), so usable between fork and exec.
fn default_signal_dispositions() {
    // SAFETY: plain signal-disposition changes; see the function's documentation.
    unsafe {
        for sig in 1..libc::SIGRTMIN() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                // The kernel's sigaction: handler, flags, restorer, mask — all zero is "default,
                // no flags" whatever the architecture's exact layout.
                let default = [0u64; 4];
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    default.as_ptr(),
                    std::ptr::null_mut::<libc::c_void>(),
                    8usize,
                );
            }
        }
    }
}

/// Blocks [`SHIM_SIGNALS`] and returns the set, for `sigtimedwait`.
fn block_shim_signals() -> io::Result<libc::sigset_t> {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set before it is read; single-threaded.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for sig in SHIM_SIGNALS {
            libc::sigaddset(set.as_mut_ptr(), sig);
        }
        if libc::sigprocmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(set.assume_init())
    }
}

/// Writes a line to stderr, ignoring failure: the daemon's stderr may be gone, and `eprintln!`
/// would panic then.
fn warn(message: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr(), "{message}");
}

fn set_once<T>(slot: &mut Option<T>, name: &str, value: T) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("{name} given twice"));
    }
    *slot = Some(value);
    Ok(())
}

fn parse_number<T: std::str::FromStr>(name: &str, value: &OsStr) -> Result<T, String> {
    value
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{name}: not a valid number: {value:?}"))
}

fn format_duration(d: Duration) -> String {
    format!("{}.{:09}", d.as_secs(), d.subsec_nanos())
}

fn parse_duration(name: &str, value: &OsStr) -> Result<Duration, String> {
    let bad = || format!("{name}: not a duration in SECONDS.NANOSECONDS: {value:?}");
    let s = value.to_str().ok_or_else(bad)?;
    let (secs, nanos) = s.split_once('.').unwrap_or((s, "0"));
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(secs) || !all_digits(nanos) || nanos.len() > 9 {
        return Err(bad());
    }
    let secs: u64 = secs.parse().map_err(|_| bad())?;
    // "5" after the point means half a second: pad on the right to nine digits.
    let nanos: u32 = format!("{nanos:0<9}").parse().map_err(|_| bad())?;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn sample() -> ShimArgs {
        ShimArgs {
            state_dir: "/var/lib/fleet state".into(),
            run_id: 17,
            token: 4,
            timeout: Some(Duration::new(600, 500)),
            kill_grace: Duration::from_millis(10_250),
            cwd: "/srv/job".into(),
            argv: os(&["sh", "-c", "echo --token; exit 3", "--"]),
            env: Vec::new(),
        }
    }

    #[test]
    fn args_round_trip() {
        let a = sample();
        assert_eq!(ShimArgs::from_args(&a.to_args()), Ok(a.clone()));
        let no_timeout = ShimArgs {
            timeout: None,
            run_id: -3,
            token: u64::MAX,
            kill_grace: Duration::MAX,
            ..a
        };
        assert_eq!(
            ShimArgs::from_args(&no_timeout.to_args()),
            Ok(no_timeout.clone())
        );
        use std::os::unix::ffi::OsStringExt;
        let odd = ShimArgs {
            cwd: PathBuf::from(OsString::from_vec(vec![b'/', 0xff, b'x'])),
            argv: vec![OsString::from_vec(vec![0xfe, b'a'])],
            ..no_timeout
        };
        assert_eq!(ShimArgs::from_args(&odd.to_args()), Ok(odd));
    }

    #[test]
    fn args_accept_short_fractions_and_any_order() {
        let args = os(&[
            "--cwd",
            "/",
            "--kill-grace",
            "2.5",
            "--token",
            "1",
            "--timeout",
            "3",
            "--run-id",
            "9",
            "--state-dir",
            "/s",
            "--",
            "true",
        ]);
        let a = ShimArgs::from_args(&args).unwrap();
        assert_eq!(a.kill_grace, Duration::from_millis(2500));
        assert_eq!(a.timeout, Some(Duration::from_secs(3)));
        assert_eq!(a.run_id, 9);
    }

    #[test]
    fn bad_args_are_errors() {
        let good = sample().to_args();
        let cases: Vec<(Vec<OsString>, &str)> = vec![
            (vec![], "missing `--`"),
            (good[..good.len() - 4].to_vec(), "empty command"),
            (good[2..].to_vec(), "missing --state-dir"),
            (os(&["--run-id"]), "missing value"),
            (os(&["--run-id", "x"]), "not a valid number"),
            (os(&["--token", "-1"]), "not a valid number"),
            (os(&["--timeout", "1.5s"]), "not a duration"),
            (os(&["--timeout", "1."]), "not a duration"),
            (os(&["--timeout", ".5"]), "not a duration"),
            (os(&["--timeout", "1.0000000001"]), "not a duration"),
            (
                os(&["--kill-grace", "99999999999999999999"]),
                "not a duration",
            ),
            (os(&["--bogus", "1"]), "unknown option"),
            (os(&["--token", "1", "--token", "2"]), "given twice"),
        ];
        for (args, expected) in cases {
            let err = ShimArgs::from_args(&args).unwrap_err();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
        use std::os::unix::ffi::OsStringExt;
        assert!(ShimArgs::from_args(&[OsString::from_vec(vec![0xff])]).is_err());
    }

    /// The register and the code agree: every `crash_point!` is listed, every listed name is a
    /// `crash_point!`, and each has a description.
    #[test]
    fn failpoint_register_matches_the_code() {
        let source = include_str!("shim.rs");
        let needle = concat!("crash_point", "!(\"");
        let mut in_code: Vec<&str> = source
            .match_indices(needle)
            .map(|(i, _)| {
                let rest = &source[i + needle.len()..];
                &rest[..rest.find('"').unwrap()]
            })
            .collect();
        in_code.sort_unstable();
        let mut registered: Vec<&str> = FAILPOINTS.iter().map(|(name, _)| *name).collect();
        registered.sort_unstable();
        assert_eq!(in_code, registered);
        assert!(FAILPOINTS.iter().all(|(_, what)| !what.trim().is_empty()));
    }
}
