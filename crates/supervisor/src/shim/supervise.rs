//! Supervising one claim, from the run's lock to its durable `exit` record (steps 2 to 8 of
//! the shim's life, `shim/mod.rs`): what [`super::main`] and `forked::main_forked` share once
//! the signals are blocked and the arguments known.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use runrecord::{now_rfc3339, ExitRecord, Outcome, Record, RunFiles, RunningRecord, StartedRecord};

use super::failpoint_macros::{crash_point, io_failpoint};
use super::log::warn;
use super::pump;
use super::start::{not_started, Decision};
use super::write::{write_exit, write_record, write_retrying};
use super::ShimArgs;
use crate::sys::signals::{self, BlockedSignals, Signal};
use crate::sys::{process, spawn, subreaper};

/// Process exit status of the shim when it ran to the end (the command's own status is in the
/// `exit` record), or when the claim was tombstoned.
pub(super) const EXIT_OK: i32 = 0;
/// Process exit status when the shim could not do its job (lock, records) — recovery reads the
/// run's files to learn what happened.
pub(super) const EXIT_FAILED: i32 = 1;
/// Process exit status for bad arguments.
pub(super) const EXIT_USAGE: i32 = 2;

/// The signals the shim blocks from its first instruction and consumes with `sigtimedwait`.
pub(super) const SHIM_SIGNALS: [Signal; 4] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
];

/// What the shim knows about its own process when it starts supervising.
pub(super) struct Own {
    /// Its start time (field 22 of `/proc/self/stat`), for the `started` record.
    pub(super) start_time: Option<u64>,
}

/// What [`super::main`] and `forked::main_forked` share once signals are blocked and arguments
/// known.
pub(super) fn supervise_claim(args: &ShimArgs, signals: &BlockedSignals, own: &Own) -> i32 {
    // Writing `running <pid>` to a dead daemon's pipe must fail, not kill the shim. Rust already
    // ignores SIGPIPE in its binaries; this keeps it true whoever embeds the shim.
    signals::ignore(&[Signal::SIGPIPE]);
    match run(args, signals, own) {
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

fn run(a: &ShimArgs, signals: &BlockedSignals, own: &Own) -> io::Result<i32> {
    crash_point!("shim-before-lock");
    let dir = RunFiles::new(&a.state_dir, a.run_id);
    let lock = dir.lock_blocking()?;
    crash_point!("shim-after-lock");

    // Right after the lock, before anything else: recovery tombstones a claim only while holding
    // this lock, so either it did so before we locked (we see it here) or it will find our
    // `started` record and not requeue. Without this check a late shim starts a requeued run a
    // second time.
    // One read of the record slot answers both this and the history below.
    let before = dir.before_start(&lock, a.token)?;
    let history = match super::start::decide(a.run_id, a.token, before, &now_rfc3339()) {
        Decision::GivenUp => {
            warn(format_args!(
                "fleet shim: run {} claim {} was given up by recovery; not starting",
                a.run_id, a.token
            ));
            return Ok(EXIT_OK);
        }
        // Another claim's `started` record: this claim ends here, recorded (see
        // `start::decide`).
        Decision::NotAgain { exit, why } => {
            warn(format_args!(
                "fleet shim: run {} claim {}: {why}",
                a.run_id, a.token
            ));
            write_exit(a, &dir, &lock, &exit)?;
            return Ok(EXIT_OK);
        }
        Decision::Start {
            history,
            unreadable_earlier,
        } => {
            if let Some(e) = unreadable_earlier {
                warn(format_args!(
                    "fleet shim: run {} claim {}: cannot read the earlier started record ({e}); \
                     its claims are missing from this record's history",
                    a.run_id, a.token
                ));
            }
            history
        }
    };

    crash_point!("shim-before-started");
    let shim_pid = std::process::id() as i32;
    let started = StartedRecord {
        token: a.token,
        shim_pid,
        shim_start_time: own.start_time.unwrap_or(0),
        at: now_rfc3339(),
        history,
    };
    // Written before the spawn: the claim is "maybe started" once any reader can see this (the
    // page cache; a restart of the machine, which may lose it, is told apart by `crate::boot`).
    // Not synced: waiting for the disk here would delay every start. Retried rather than given
    // up (a full disk, say): the shim keeps the lock, and the command starts once it is written.
    let started = Record::Started(started);
    write_retrying(a, "started", || {
        io_failpoint!("shim-started-record-fails");
        crash_point!("shim-started-record-torn", dir.write_torn(&lock, &started));
        write_record(&dir, &lock, started.clone())
    })?;
    crash_point!("shim-after-started");

    // Before the command starts: whatever it starts that leaves its process group (setsid, a
    // daemon's double fork) is then handed to this shim when its parent dies, not to init,
    // and ends with the run (`supervise`) instead of running beside its retry.
    if let Err(e) = subreaper::become_subreaper() {
        warn(format_args!(
            "fleet shim: run {} claim {}: cannot become the subreaper of the command's processes ({e}); what leaves its process group will outlive the run",
            a.run_id, a.token
        ));
    }
    let (pid, mut pump) = match spawn_command(a, &dir, shim_pid, signals) {
        Ok(spawned) => spawned,
        Err(message) => {
            // Best effort: the log is where operators look; the exit record is what counts.
            note_in_log(&dir, &message);
            write_exit(
                a,
                &dir,
                &lock,
                &not_started(a.token, Outcome::SpawnFailed, message, &now_rfc3339()),
            )?;
            return Ok(EXIT_OK);
        }
    };
    let spawned = Instant::now();
    let started_at = now_rfc3339();
    let running = RunningRecord {
        token: a.token,
        pid,
        at: started_at.clone(),
    };
    if let Err(e) = write_record(&dir, &lock, Record::Running(running)) {
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

    let ended = supervise(pid, a, spawned, signals, pump.as_mut())?;
    crash_point!("shim-after-exit");
    if ended.escaped > 0 {
        // Best effort, as for a command that could not start: the run's log is where
        // operators look for why a helper the command left behind is gone. After the
        // command's own output (the pump has finished), before the exit record.
        let how = match ended.killed {
            0 => "SIGTERM".to_string(),
            n => format!("SIGTERM; SIGKILL for {n} still running after the kill grace"),
        };
        note_in_log(
            &dir,
            &format!(
                "fleet: ended {} process(es) the command had started outside its process group (setsid, a double fork), still running when it ended ({how})",
                ended.escaped
            ),
        );
    }

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
        repeats: None,
    };
    write_exit(a, &dir, &lock, &record)?;
    // Only now may the lock go (on return): a free lock with an exit record means "finalize".
    drop(lock);
    Ok(EXIT_OK)
}

/// Spawns the command, with its output going to the log: through a [`pump::LogPump`] when
/// the log has a bound, straight to the file otherwise. Returns the command's pid. `Err`
/// carries the one-line message for the log and the exit record.
///
/// The command starts clean and tied to the shim ([`spawn::spawn_tied`]): an empty signal mask
/// and default dispositions (a daemon started from a script with SIGINT ignored must not pass
/// that on), its own process group (so that a timeout or cancel reaches its children too, and
/// the group can be swept when it ends), and the parent-death signal, so that it never
/// outlives its shim.
fn spawn_command(
    a: &ShimArgs,
    dir: &RunFiles,
    shim_pid: i32,
    signals: &BlockedSignals,
) -> Result<(i32, Option<pump::LogPump>), String> {
    let (log, pump) = pump::command_output(a.max_log_size, dir, signals)?;
    let log_err = log
        .try_clone()
        .map_err(|e| format!("fleet: could not duplicate the run's log descriptor: {e}"))?;
    let null = OpenOptions::new()
        .read(true)
        .open("/dev/null")
        .map_err(|e| format!("fleet: could not open /dev/null for the command's input: {e}"))?;
    let env = command_env(a);
    let could_not_start = |e: io::Error| {
        if e.kind() == io::ErrorKind::ArgumentListTooLong {
            // Name the command and the limit it passed; never copy the oversized arguments
            // into the log and the run's reason.
            let changes = a.env.iter().cloned().chain([("FAILPOINTS".into(), None)]);
            let env = crate::exec_limits::environment_with(changes);
            return format!(
                "fleet: {}",
                crate::exec_limits::refused_message(&a.argv, &env)
            );
        }
        format!(
            "fleet: could not start command {:?} in {}: {e}",
            a.argv,
            a.cwd.display()
        )
    };
    // Every disposition of the shim is the default (`main` and `set_up_forked` saw to it) but
    // the SIGPIPE that `supervise_claim` ignores: the command's start sets only that one back.
    let cmd = spawn::PreparedCommand::new(&a.argv, &env, &a.cwd)
        .map_err(could_not_start)?
        .reset_only(vec![Signal::SIGPIPE as i32]);
    let fds = spawn::StdFds {
        stdin: null.as_fd(),
        stdout: log.as_fd(),
        stderr: log_err.as_fd(),
    };
    let pid = spawn::spawn_tied(&cmd, fds, shim_pid).map_err(could_not_start)?;
    // The pipe's write ends are the command's now: the shim's copies must go, or the pump
    // would never see end-of-file.
    drop((log, log_err, null));
    Ok((pid, pump))
}

/// The command's environment: the shim's own (the daemon's, with the run's variables already
/// set when the shim was exec'd), with the run's changes applied, and without the failpoint
/// configuration, which is the shim's, not the command's (removed last, so that the exec'd and
/// the forked shim treat it alike).
fn command_env(a: &ShimArgs) -> Vec<(OsString, OsString)> {
    let mut env: std::collections::BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (key, value) in &a.env {
        match value {
            Some(v) => env.insert(key.clone(), v.clone()),
            None => env.remove(key),
        };
    }
    env.remove(std::ffi::OsStr::new("FAILPOINTS"));
    env.into_iter().collect()
}

/// Appends `line` to the run's log as a line of its own: after a newline when the command's
/// output did not end with one, so that the log's last line is the note (scripts look for it
/// with `tail -n1`). Best effort: the log is where operators look, the records are what count.
fn note_in_log(dir: &RunFiles, line: &str) {
    let Ok(mut log) = dir.open_log() else {
        return;
    };
    let ends_open = std::fs::File::open(dir.log_path())
        .and_then(|f| {
            let len = f.metadata()?.len();
            let mut last = [b'\n'];
            if len > 0 {
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut last, len - 1)?;
            }
            Ok(last[0] != b'\n')
        })
        .unwrap_or(false);
    let _ = writeln!(log, "{}{line}", if ends_open { "\n" } else { "" });
}

/// How often the shim looks again for what the command left running while it waits for it to
/// end after SIGTERM (a SIGCHLD wakes it sooner).
const LEFTOVERS_POLL: Duration = Duration::from_millis(50);

/// What the wait loop learnt.
struct Ended {
    status: ExitStatus,
    /// How many processes that had left the command's process group were still running at its
    /// end (sent SIGTERM, or killed at once when the grace was already over).
    escaped: usize,
    /// How many of them were still running once the grace was over, and were killed.
    killed: usize,
    timed_out: bool,
    term_requested: bool,
    finished_at: String,
}

/// Waits for the command, passing on termination requests and enforcing the timeout and kill
/// grace; then kills what is left of its process group and reaps it.
fn supervise(
    pid: i32,
    a: &ShimArgs,
    spawned: Instant,
    signals: &BlockedSignals,
    mut pump: Option<&mut pump::LogPump>,
) -> io::Result<Ended> {
    // The command leads its own process group.
    let pgid = pid;
    // `None` when there is no timeout, when it already fired, or when it is too far to express.
    let mut timeout_at = a.timeout.and_then(|t| spawned.checked_add(t));
    let mut terminating = false;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut timed_out = false;
    let mut term_requested = false;

    loop {
        if process::has_exited(pgid)? {
            break;
        }
        // Orphans adopted as subreaper that ended meanwhile: reaped now, so that a long run
        // whose command leaves many does not pile up zombies.
        subreaper::reap_adopted(pid);
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
            signal_group(pgid, Signal::SIGKILL);
        }
        let next = [timeout_at, if killed { None } else { kill_at }]
            .into_iter()
            .flatten()
            .min();
        let wait = next.map(|d| d.saturating_duration_since(Instant::now()));
        // SIGCHLD, a deadline or an interruption need nothing here: the top of the loop looks
        // again at the command and the clock.
        // With a bounded log, the same wait also copies the command's output to the log.
        let got = match pump.as_deref_mut() {
            Some(p) => p.wait(wait)?,
            None => signals.wait(wait),
        };
        if let Some(Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP) = got {
            term_requested = true;
            begin_termination(pgid, a.kill_grace, &mut terminating, &mut kill_at);
        }
    }
    let finished_at = now_rfc3339();
    // What the command left running — in its group (a background child) or outside it (a
    // helper it detached) — is ended as a termination ends the command: SIGTERM, then SIGKILL
    // once the grace is over, so that it may clean up (a lock file, a temporary folder). A
    // termination already under way keeps its deadline; one whose grace is over gets none.
    // The leader is a zombie, not reaped: its pid, hence the group id, cannot be reused yet,
    // so a signal to the group reaches only processes the command left in it.
    let mut leftovers = subreaper::Leftovers::default();
    if !killed {
        let deadline = if terminating {
            kill_at
        } else {
            signal_group(pgid, Signal::SIGTERM);
            Instant::now().checked_add(a.kill_grace)
        };
        while leftovers.term(pid, pgid) && deadline.is_none_or(|d| Instant::now() < d) {
            // A SIGCHLD ends the wait early; the cap catches the end of a process that is
            // not this shim's child (a grandchild whose parent lives on), which sends none.
            let wait = deadline
                .map_or(LEFTOVERS_POLL, |d| {
                    d.saturating_duration_since(Instant::now())
                })
                .min(LEFTOVERS_POLL);
            // A termination request now changes nothing: the command has ended.
            match pump.as_deref_mut() {
                Some(p) => p.wait(Some(wait))?,
                None => signals.wait(Some(wait)),
            };
        }
    }
    signal_group(pgid, Signal::SIGKILL);
    let status = spawn::wait_child(pid)?;
    // And what left the group, handed to this shim as its subreaper: killed and reaped too,
    // together with the group's processes handed over as their parents died, before the exit
    // record is written and the lock released — so nothing of this attempt runs beside the
    // next one.
    let adopted = leftovers.end(pgid);
    if adopted.escaped > 0 {
        warn(format_args!(
            "fleet shim: run {} claim {}: {} process(es) the command started had left its process group and were still running when it ended; sent SIGTERM, and SIGKILL to {} still running after the kill grace",
            a.run_id, a.token, adopted.escaped, adopted.killed
        ));
    }
    if !adopted.unkillable.is_empty() {
        warn(format_args!(
            "fleet shim: run {} claim {}: process(es) {:?}, started by the command, run as another user and could not be killed; left running (`kill -KILL PID` as their user ends them)",
            a.run_id, a.token, adopted.unkillable
        ));
    }
    // Whatever the group wrote before it went is in the pipe: into the log before the exit
    // record, so that a run recorded as ended has its whole log.
    if let Some(p) = pump {
        p.finish();
    }
    Ok(Ended {
        status,
        escaped: adopted.escaped,
        killed: adopted.killed,
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
        signal_group(pgid, Signal::SIGTERM);
        // Too far to express means never: the command gets the whole grace it was given.
        *kill_at = Instant::now().checked_add(kill_grace);
    }
}

/// Sends `sig` to the command's process group. An empty group (nobody left) is expected and
/// ignored; any other failure is reported on stderr.
fn signal_group(pgid: i32, sig: Signal) {
    // `pgid` is our unreaped child's pid, so it names our command's group.
    if let Err(e) = process::signal_group(pgid, sig) {
        warn(format_args!(
            "fleet shim: could not send signal {} to process group {pgid}: {e}",
            sig as i32
        ));
    }
}
