//! Process-level tests of the shim: they run the real shim code as its own process (this test
//! binary re-executed with `--fleet-test-shim`, see [`RUN_AS_SHIM`]) on real commands, and check
//! the run's files, the log, the lock and the processes left behind.
//!
//! No sleeping for synchronisation: every wait polls a condition against a deadline.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use runrecord::{Outcome, RunFiles, RunningRecord};
use supervisor::shim::ShimArgs;
use supervisor::sys::signals::Signal;

const DEADLINE: Duration = Duration::from_secs(20);

/// Before libtest's `main` runs (so before it starts any thread): when this test binary is
/// re-executed as `<test binary> --fleet-test-shim ARGS...`, it becomes the shim
/// (`supervisor::shim::main(ARGS)`) and exits. The shim must be single-threaded, which a libtest
/// test function is not (libtest runs tests on spawned threads; signals sent to the process
/// could land on its main thread); an `.init_array` constructor runs on the only thread. And the
/// shim code is then always the one compiled with this test, same source and same features
/// (`failpoints`), under `cargo test` and `cargo nextest` alike.
#[used]
#[link_section = ".init_array"]
static RUN_AS_SHIM: extern "C" fn() = run_as_shim;

const SHIM_FLAG: &str = "--fleet-test-shim";

extern "C" fn run_as_shim() {
    use std::os::unix::ffi::OsStringExt;
    // std::env::args is not guaranteed to be set up yet; /proc/self/cmdline always is.
    let Ok(cmdline) = fs::read("/proc/self/cmdline") else {
        return;
    };
    let mut args: Vec<OsString> = cmdline
        .split(|&b| b == 0)
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect();
    args.pop(); // after the final NUL
    if args.get(1).is_some_and(|a| a == SHIM_FLAG) {
        // SAFETY: before libtest's `main`, on the only thread: the only descriptor opened so far
        // (reading /proc/self/cmdline) is closed again, so nothing owns one above stderr, and
        // `exit` follows without returning to any code that could.
        std::process::exit(unsafe { supervisor::shim::main(&args[2..]) });
    }
}

fn shim_command() -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.arg(SHIM_FLAG);
    cmd
}

struct Fixture {
    _tmp: tempfile::TempDir,
    state: PathBuf,
    work: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let work = tmp.path().join("work");
        fs::create_dir_all(&work).unwrap();
        Fixture {
            _tmp: tmp,
            state,
            work,
        }
    }

    fn args(&self, token: u64, argv: &[&str]) -> ShimArgs {
        ShimArgs {
            state_dir: self.state.clone(),
            run_id: 1,
            token,
            timeout: None,
            kill_grace: Duration::from_secs(5),
            cwd: self.work.clone(),
            // As the daemon always does: every test here goes through the log pump.
            max_log_size: Some(64 << 20),
            argv: argv.iter().map(OsString::from).collect(),
            env: Vec::new(),
            log: Default::default(),
        }
    }

    fn dir(&self) -> RunFiles {
        RunFiles::new(&self.state, 1)
    }
}

/// Starts the shim the way the daemon does: its own session, stdout a pipe; here stderr is a pipe
/// too, so tests can read what the shim says.
fn spawn_shim(args: &ShimArgs, env: &[(&str, &str)]) -> Child {
    let mut cmd = shim_command();
    cmd.args(args.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    // Its own session, as the daemon starts it.
    supervisor::sys::process::spawn_in_new_session(&mut cmd);
    cmd.spawn().expect("spawn the shim")
}

fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for the shim to exit; returns its status, stdout and stderr.
fn finish(mut shim: Child) -> (ExitStatus, String, String) {
    let status = poll("the shim to exit", || shim.try_wait().unwrap());
    let mut out = String::new();
    let mut err = String::new();
    shim.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    shim.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, out, err)
}

fn wait_running(dir: &RunFiles, token: u64) -> RunningRecord {
    poll("the running record", || {
        dir.read_running().unwrap().filter(|r| r.token == token)
    })
}

/// Gone, or a zombie (dead, waiting for a parent that may never reap it in a container).
fn is_dead(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let rest = &stat[stat.rfind(')').unwrap() + 1..];
            rest.split_whitespace().next() == Some("Z")
        }
    }
}

fn read_pid(path: &Path) -> i32 {
    poll("a pid file", || {
        fs::read_to_string(path)
            .ok()
            .filter(|s| s.ends_with('\n'))
            .and_then(|s| s.trim().parse().ok())
    })
}

fn kill(pid: i32, sig: Signal) {
    assert!(pid > 0, "kill({pid}) would signal a process group");
    supervisor::sys::process::signal_process(pid, sig).expect("signal the shim");
}

#[test]
fn exit_code_is_recorded() {
    let f = Fixture::new();
    let shim = spawn_shim(&f.args(3, &["sh", "-c", "exit 3"]), &[]);
    let shim_pid = shim.id() as i32;
    let (status, out, err) = finish(shim);
    assert!(status.success(), "{status:?} {err}");
    assert!(
        !err.contains("record"),
        "records written at the first attempt need no word: {err}"
    );
    let dir = f.dir();
    let exit = dir.read_exit().unwrap().expect("exit record");
    assert_eq!(exit.token, 3);
    assert_eq!(exit.outcome, Outcome::Exited);
    assert_eq!(exit.code, Some(3));
    assert_eq!(exit.signal, None);
    assert!(!exit.timed_out && !exit.term_requested);
    assert_eq!(exit.error, None);
    assert!(exit.started_at.is_some());
    let running = dir.read_running().unwrap().expect("running record");
    assert_eq!(running.token, 3);
    assert_eq!(out, format!("running {}\n", running.pid));
    let started = dir.read_started().unwrap().expect("started record");
    assert_eq!(started.token, 3);
    assert_eq!(started.shim_pid, shim_pid);
    assert!(started.shim_start_time > 0);
    assert!(!dir.is_locked().unwrap(), "the lock is released at exit");
}

/// The bytes of `dir`'s slot: its records as the shim wrote them.
fn slot_bytes(dir: &RunFiles) -> Vec<u8> {
    let slot = dir.record_slot();
    slot.read(&slot.open(false).unwrap()).unwrap()
}

#[test]
fn started_record_is_written_before_the_command_runs() {
    let f = Fixture::new();
    let dir = f.dir();
    // The command copies its run's slot as it finds it when it runs.
    let segment = dir.lock_path();
    let slot = (dir.record_slot().range().start / runrecord::SLOT_LEN).to_string();
    let seen = f.work.join("seen");
    let script = r#"dd if="$1" bs=4096 skip="$3" count=1 2>/dev/null | tr -d '\000' > "$2""#;
    let args = f.args(
        8,
        &[
            "sh",
            "-c",
            script,
            "sh",
            segment.to_str().unwrap(),
            seen.to_str().unwrap(),
            &slot,
        ],
    );
    let (status, _, err) = finish(spawn_shim(&args, &[]));
    assert!(status.success(), "{err}");
    assert_eq!(dir.read_exit().unwrap().unwrap().code, Some(0), "{err}");
    let seen = runrecord::records::decode(&fs::read(&seen).unwrap(), &seen);
    assert_eq!(
        seen.exit, None,
        "the command ran before its end was recorded"
    );
    let started = seen
        .started
        .expect("started is on record when the command runs");
    assert_eq!(started.token, 8);
    assert_eq!(Some(started), dir.read_started().unwrap());
}

#[test]
fn missing_program_is_spawn_failed_with_the_reason_in_the_log() {
    let f = Fixture::new();
    let args = f.args(2, &["fleet-test-no-such-program"]);
    let (status, out, err) = finish(spawn_shim(&args, &[]));
    assert!(status.success(), "{err}");
    assert_eq!(out, "", "no `running` line for a command that never ran");
    let dir = f.dir();
    let exit = dir.read_exit().unwrap().unwrap();
    assert_eq!(exit.outcome, Outcome::SpawnFailed);
    assert_eq!(
        (exit.code, exit.signal, exit.started_at),
        (None, None, None)
    );
    let message = exit.error.expect("error message");
    assert_eq!(
        message,
        format!(
            "fleet: could not start command [\"fleet-test-no-such-program\"] in {}: \
             No such file or directory (os error 2)",
            f.work.display()
        )
    );
    let log = fs::read_to_string(dir.log_path()).unwrap();
    assert_eq!(log, format!("{message}\n"));
    assert!(dir.read_started().unwrap().is_some());
    assert!(dir.read_running().unwrap().is_none());
}

#[test]
fn bad_cwd_is_spawn_failed() {
    let f = Fixture::new();
    let mut args = f.args(2, &["true"]);
    args.cwd = f.work.join("nowhere");
    let (status, _, err) = finish(spawn_shim(&args, &[]));
    assert!(status.success(), "{err}");
    let exit = f.dir().read_exit().unwrap().unwrap();
    assert_eq!(exit.outcome, Outcome::SpawnFailed);
    assert!(exit.error.unwrap().contains("nowhere"));
}

#[test]
fn timeout_terminates_the_whole_process_group() {
    let f = Fixture::new();
    let mut args = f.args(
        5,
        &["sh", "-c", "sleep 30 & echo $! > grandchild; sleep 30"],
    );
    args.timeout = Some(Duration::from_secs(1));
    let started = Instant::now();
    let (status, _, err) = finish(spawn_shim(&args, &[]));
    assert!(status.success(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let exit = f.dir().read_exit().unwrap().unwrap();
    assert!(exit.timed_out);
    assert!(!exit.term_requested);
    assert_eq!(exit.outcome, Outcome::Signalled);
    assert_eq!(exit.signal, Some(libc::SIGTERM));
    let grandchild = read_pid(&f.work.join("grandchild"));
    poll("the grandchild to die", || {
        is_dead(grandchild).then_some(())
    });
}

#[test]
fn timeout_escalates_to_sigkill_after_the_grace() {
    let f = Fixture::new();
    let mut args = f.args(
        5,
        &[
            "sh",
            "-c",
            "trap '' TERM; sleep 30 & echo $! > grandchild; wait",
        ],
    );
    args.timeout = Some(Duration::from_millis(500));
    args.kill_grace = Duration::from_millis(500);
    let (status, _, err) = finish(spawn_shim(&args, &[]));
    assert!(status.success(), "{err}");
    let exit = f.dir().read_exit().unwrap().unwrap();
    assert!(exit.timed_out);
    assert_eq!(exit.signal, Some(libc::SIGKILL));
    let grandchild = read_pid(&f.work.join("grandchild"));
    poll("the grandchild to die", || {
        is_dead(grandchild).then_some(())
    });
}

#[test]
fn leftover_grandchild_is_killed_after_the_command_exits() {
    let f = Fixture::new();
    let args = f.args(5, &["sh", "-c", "sleep 30 & echo $! > grandchild; exit 0"]);
    let (status, _, err) = finish(spawn_shim(&args, &[]));
    assert!(status.success(), "{err}");
    let exit = f.dir().read_exit().unwrap().unwrap();
    assert_eq!((exit.outcome, exit.code), (Outcome::Exited, Some(0)));
    let grandchild = read_pid(&f.work.join("grandchild"));
    poll("the grandchild to die", || {
        is_dead(grandchild).then_some(())
    });
}

#[test]
fn sigterm_to_the_shim_terminates_the_command() {
    let f = Fixture::new();
    let shim = spawn_shim(&f.args(6, &["sleep", "30"]), &[]);
    let running = wait_running(&f.dir(), 6);
    kill(shim.id() as i32, Signal::SIGTERM);
    let (status, _, err) = finish(shim);
    assert!(status.success(), "{err}");
    let exit = f.dir().read_exit().unwrap().unwrap();
    assert!(exit.term_requested);
    assert!(!exit.timed_out);
    assert_eq!(exit.outcome, Outcome::Signalled);
    assert_eq!(exit.signal, Some(libc::SIGTERM));
    assert!(is_dead(running.pid));
}

#[test]
fn tombstoned_claim_never_runs_the_command() {
    let f = Fixture::new();
    let dir = f.dir();
    // Recovery holds the lock while the (late) shim starts, and tombstones its claim: the shim
    // blocks on the lock, then must find the tombstone.
    let lock = dir.try_lock().unwrap().expect("lock");
    let shim = spawn_shim(&f.args(7, &["sh", "-c", "touch marker"]), &[]);
    dir.write_tombstone(&lock, 7).unwrap();
    drop(lock);
    let (status, out, err) = finish(shim);
    assert!(status.success(), "{err}");
    assert_eq!(out, "");
    assert!(
        err.contains("fleet shim: run 1 claim 7 was given up by recovery; not starting"),
        "{err}"
    );
    assert!(!f.work.join("marker").exists());
    assert!(dir.read_started().unwrap().is_none());
    assert!(dir.read_exit().unwrap().is_none());

    // A later claim of the same run is not affected by the earlier claim's tombstone.
    let (status, _, err) = finish(spawn_shim(&f.args(8, &["sh", "-c", "touch marker"]), &[]));
    assert!(status.success(), "{err}");
    assert!(f.work.join("marker").exists());
    assert_eq!(dir.read_exit().unwrap().unwrap().token, 8);
}

#[test]
fn lock_is_held_while_running_and_not_inherited_by_the_command() {
    let f = Fixture::new();
    let dir = f.dir();
    let shim = spawn_shim(&f.args(4, &["sleep", "30"]), &[]);
    let running = wait_running(&dir, 4);
    assert!(dir.is_locked().unwrap());
    let lock_path = fs::canonicalize(dir.lock_path()).unwrap();
    for fd in fs::read_dir(format!("/proc/{}/fd", running.pid)).unwrap() {
        let target = fs::read_link(fd.unwrap().path()).unwrap_or_default();
        assert_ne!(target, lock_path, "the command inherited the lock");
    }
    kill(shim.id() as i32, Signal::SIGTERM);
    let (status, _, err) = finish(shim);
    assert!(status.success(), "{err}");
    assert!(!dir.is_locked().unwrap());
}

#[test]
fn sigkilled_shim_takes_the_command_with_it_and_frees_the_lock() {
    let f = Fixture::new();
    let dir = f.dir();
    let shim = spawn_shim(&f.args(4, &["sleep", "30"]), &[]);
    let running = wait_running(&dir, 4);
    kill(shim.id() as i32, Signal::SIGKILL);
    let (status, _, _) = finish(shim);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    poll("the command to die", || is_dead(running.pid).then_some(()));
    assert!(!dir.is_locked().unwrap());
    assert!(dir.read_exit().unwrap().is_none(), "fate unknown: lost");
    assert!(dir.read_started().unwrap().is_some());
}

#[test]
fn command_sees_the_environment_without_failpoints_and_dev_null() {
    let f = Fixture::new();
    let script = r#"echo "x=$X fp=${FAILPOINTS-unset}"
readlink /proc/self/fd/0
echo to-stderr >&2"#;
    let args = f.args(1, &["sh", "-c", script]);
    let (status, _, err) = finish(spawn_shim(
        &args,
        &[("X", "hello"), ("FAILPOINTS", "no-such-point=off")],
    ));
    assert!(status.success(), "{err}");
    let log = fs::read_to_string(f.dir().log_path()).unwrap();
    assert_eq!(log, "x=hello fp=unset\n/dev/null\nto-stderr\n");
}

/// The shim blocks signals for sigtimedwait; the command must not inherit that mask (std does
/// not reset it), nor an ignored SIGPIPE. Not through a shell: shells reset their mask.
#[test]
fn command_starts_with_a_clean_signal_state() {
    let f = Fixture::new();
    let args = f.args(1, &["grep", "-E", "^(SigBlk|SigIgn):", "/proc/self/status"]);
    // The shim inherits SIGQUIT ignored, as from a script that started the daemon with `&`, and
    // a real-time signal ignored too (ignored dispositions survive exec, real-time ones alike).
    let realtime = libc::SIGRTMIN() + 1;
    let mut cmd = shim_command();
    cmd.args(args.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // calls are sound. signal(2) and setsid(2) are; the closure allocates nothing and takes no
    // lock (`last_os_error` only reads errno; the real-time signal's number was read before the
    // fork). SIG_IGN installs no handler of ours.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
            libc::signal(realtime, libc::SIG_IGN);
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (status, _, err) = finish(cmd.spawn().expect("spawn the shim"));
    assert!(status.success(), "{err}");
    let log = fs::read_to_string(f.dir().log_path()).unwrap();
    let mask = |name: &str| {
        let line = log.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(
        mask("SigBlk:"),
        0,
        "the shim's blocked signals leaked: {log}"
    );
    // The standard signals 1..=31 (32 and 33 belong to the C library, which keeps them).
    let standard = (1u64 << 31) - 1;
    assert_eq!(
        mask("SigIgn:") & standard,
        0,
        "the command inherited ignored signals (SIGPIPE, SIGQUIT…): {log}"
    );
    // And the real-time signals, SIGRTMIN..=SIGRTMAX (signal n is bit n - 1).
    let (first, last) = (libc::SIGRTMIN() as u32, libc::SIGRTMAX() as u32);
    let realtime_bits = (first - 1..last).fold(0u64, |bits, bit| bits | 1 << bit);
    assert_ne!(realtime_bits & 1 << (realtime - 1), 0);
    assert_eq!(
        mask("SigIgn:") & realtime_bits,
        0,
        "the command inherited an ignored real-time signal (SIGRTMIN+1): {log}"
    );
}

/// A second claim of a run whose command was started already, with no end on record (its
/// files hold the first claim's `started` record alone: a database restored from a backup that
/// still queued a run whose end the files never got, or another install's files) is refused:
/// its shim records an `already_started` exit naming the first claim, and starts nothing.
#[test]
fn a_second_claim_of_a_started_run_is_refused() {
    let f = Fixture::new();
    let dir = f.dir();
    dir.create_runs_dir().unwrap();
    {
        let lock = dir.lock_blocking().unwrap();
        let started = runrecord::StartedRecord {
            token: 1,
            shim_pid: 1,
            shim_start_time: 1,
            at: "2026-01-01T00:00:00Z".into(),
            history: vec![1],
        };
        dir.write_started(&lock, &started).unwrap();
    }
    let (status, _, err) = finish(spawn_shim(&f.args(2, &["sh", "-c", "echo claim 2"]), &[]));
    assert!(status.success(), "{err}");
    assert!(
        !dir.log_path().exists() || fs::read_to_string(dir.log_path()).unwrap().is_empty(),
        "the second claim ran its command"
    );
    let exit = dir.read_exit().unwrap().unwrap();
    assert_eq!(exit.token, 2);
    assert_eq!(exit.outcome, runrecord::Outcome::AlreadyStarted);
    assert!(
        exit.error
            .as_deref()
            .is_some_and(|e| e.contains("already started, by claim 1")),
        "{exit:?}"
    );
    let started = dir.read_started().unwrap().unwrap();
    assert_eq!((started.token, started.history), (1, vec![1]));
}

/// A second claim of a run whose command ran to its end under a first claim (its files hold
/// that claim's `started` and `exit` records: a database restored from a backup that still
/// queued the run) starts nothing, and records the first claim's end as its own: the run ends
/// as its command did, exit code included.
#[test]
fn a_second_claim_of_an_ended_run_repeats_its_end() {
    let f = Fixture::new();
    for token in [1, 2] {
        let script = format!("echo claim {token}; exit 3");
        let (status, _, err) = finish(spawn_shim(&f.args(token, &["sh", "-c", &script]), &[]));
        assert!(status.success(), "{err}");
    }
    let dir = f.dir();
    assert_eq!(fs::read_to_string(dir.log_path()).unwrap(), "claim 1\n");
    let exit = dir.read_exit().unwrap().unwrap();
    assert_eq!(exit.token, 2);
    assert_eq!(exit.outcome, runrecord::Outcome::Exited);
    assert_eq!(exit.code, Some(3));
    assert!(exit.started_at.is_some(), "{exit:?}");
    let (status, code, ..) = supervisor::settle::outcome(&exit);
    assert_eq!((status, code), (store::RunStatus::Failed, Some(3)));
    let started = dir.read_started().unwrap().unwrap();
    assert_eq!((started.token, started.history), (1, vec![1]));
}

#[test]
fn bad_arguments_exit_2() {
    let out = shim_command()
        .arg("--bogus")
        .output()
        .expect("run the shim");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad arguments"));
}

/// The shim's failpoints: run with `cargo test -p supervisor --features failpoints`.
#[cfg(feature = "failpoints")]
mod failpoints;

/// Ten times `max_log_size` of output: the command ends with its own status (never killed nor
/// blocked for the bound), the log holds at most the bound plus the marker, ends with the
/// command's last line, and the marker counts exactly the bytes that are gone.
#[test]
fn a_log_past_its_bound_keeps_the_tail_under_the_bound() {
    use runrecord::{parse_marker, MARKER_MAX_LEN};
    let f = Fixture::new();
    let max: u64 = 64 << 10;
    let mut args = f.args(1, &["sh", "-c", "seq 1 120000; echo done >&2"]);
    args.max_log_size = Some(max);
    let (status, _, err) = finish(spawn_shim(&args, &[]));
    assert!(status.success(), "{err}");
    let exit = f.dir().read_exit().unwrap().unwrap();
    assert_eq!((exit.outcome, exit.code), (Outcome::Exited, Some(0)));
    let log = fs::read(f.dir().log_path()).unwrap();
    assert!(
        log.len() as u64 <= max + MARKER_MAX_LEN as u64,
        "{} bytes",
        log.len()
    );
    let whole: u64 = (1..=120000u64)
        .map(|n| n.to_string().len() as u64 + 1)
        .sum::<u64>()
        + 5;
    assert!(whole > 10 * max);
    let (marker, dropped) = parse_marker(&log).expect("the log starts with the marker");
    assert_eq!(dropped + (log.len() - marker) as u64, whole);
    assert!(log.ends_with(b"119999\n120000\ndone\n"));
}

/// A process that left the command's group (its own session) and keeps the output pipe open
/// does not hold the shim: the command's end is the run's end.
#[test]
fn an_escaped_writer_does_not_hold_the_shim() {
    let f = Fixture::new();
    let args = f.args(
        1,
        &["sh", "-c", "setsid sh -c 'sleep 30' & echo leader-done"],
    );
    let begun = Instant::now();
    let (status, _, err) = finish(spawn_shim(&args, &[]));
    assert!(status.success(), "{err}");
    assert!(
        begun.elapsed() < Duration::from_secs(20),
        "the shim waited for the escaped writer"
    );
    // The command's output, and the shim's note when the escaped writer had left the group by
    // then (`setsid` may not have run yet when the leader ends: then the group's signal took
    // it). One process or two: the `sh` and, if it forked rather than exec'd it, its `sleep`.
    let log = fs::read_to_string(f.dir().log_path()).unwrap();
    let note = |n: usize| {
        format!(
            "leader-done\nfleet: ended {n} process(es) the command had started outside its \
             process group (setsid, a double fork), still running when it ended (SIGTERM)\n"
        )
    };
    assert!(
        log == "leader-done\n" || log == note(1) || log == note(2),
        "{log:?}"
    );
}

/// A complete line of the slot that is not a record may have been this claim's tombstone:
/// with no tombstone of its token readable, the shim refuses to start the command (fails
/// closed) rather than guess "not given up".
#[test]
fn an_unreadable_line_in_the_slot_keeps_the_command_from_starting() {
    let f = Fixture::new();
    let dir = f.dir();
    drop(dir.try_lock().unwrap().expect("lock"));
    let slot = dir.record_slot();
    std::os::unix::fs::FileExt::write_all_at(
        &slot.open(false).unwrap(),
        b"{\"record\":\"tombst\n",
        slot.range().start,
    )
    .unwrap();
    let (status, out, err) = finish(spawn_shim(&f.args(7, &["sh", "-c", "touch marker"]), &[]));
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(out, "");
    assert!(err.contains("line 1"), "{err}");
    assert!(!f.work.join("marker").exists(), "the command ran");
}
