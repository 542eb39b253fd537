//! End-to-end tests of the fork server (crates/supervisor/src/shim/forkserver.rs): the daemon forks
//! each run's shim from a small process forked before its runtime, instead of exec'ing the fleet
//! binary. The command must not be able to tell the two apart, a fork server that dies must only
//! slow the daemon down, and it must never outlive its daemon. A forked shim whose run ended
//! supervises the next one: each run still ends as its own, no signal crosses from one run to
//! the next, an ended run's seat is not held by its shim living on, and idle shims go.
//!
//! The crash of the fork server between its fork and its answer has its own test in
//! tests/e2e/failpoints (`forkserver_after_fork`).

use std::path::PathBuf;
use std::time::Duration;

use crate::common::restart::assert_stays_queued;
use crate::common::*;

/// What commands report about the world they start in, one project each: their environment
/// (FLEET_* and variables set on the daemon and the project), their open descriptors, blocked
/// and ignored signals, process group and session (`pid pgrp sid`), and the name of
/// their parent (the shim). Programs read their own /proc entry, so what they see is the state
/// exec gave them, not some shell's.
const PROBES: &[(&str, &str)] = &[
    (
        "env",
        r#"["sh", "-c", "echo RUN=$FLEET_RUN_ID PROJECT=$FLEET_PROJECT NS=$FLEET_NAMESPACE ATTEMPT=$FLEET_ATTEMPT OCC=${FLEET_OCCURRENCE-unset} GREETING=$GREETING FROM_DAEMON=$FROM_DAEMON"]"#,
    ),
    ("fds", r#"["ls", "/proc/self/fd"]"#),
    (
        "signals",
        r#"["grep", "-E", "^(SigBlk|SigIgn):", "/proc/self/status"]"#,
    ),
    (
        "ids",
        r#"["cut", "-d", " ", "-f", "1,5,6", "/proc/self/stat"]"#,
    ),
    ("parent", r#"["sh", "-c", "cat /proc/$PPID/comm"]"#),
    (
        "parent_cmdline",
        r#"["sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline; echo"]"#,
    ),
];

/// Runs every probe under a daemon started with `env`, from `bin` (or the shared binary);
/// returns (probe, log) pairs, the daemon's session id, and the program its fork server runs
/// (`None`: no fork server).
fn probe(
    env: &[(&str, &str)],
    bin: Option<PathBuf>,
) -> (Vec<(&'static str, String)>, String, Option<PathBuf>) {
    let mut toml = String::new();
    for (name, command) in PROBES {
        toml += &format!("[projects.{name}]\nenv = {{ GREETING = \"hi\" }}\ncommand = {command}\n");
    }
    let mut f = Fleet::new(&toml);
    if let Some(bin) = bin {
        f = f.with_binary(bin);
    }
    let mut all = vec![("FROM_DAEMON", "yes"), ("FLEET_OCCURRENCE", "stale")];
    all.extend_from_slice(env);
    // Started as from a script that ignored SIGQUIT, a real-time signal and SIGCHLD: the
    // daemon, its fork server and every exec'd shim inherit them, and the command must not
    // (nor may an exec'd shim keep SIGCHLD ignored: the kernel would reap its command for it).
    let d = f.start_daemon_ignoring(&all, &[libc::SIGQUIT, libc::SIGRTMIN() + 1, libc::SIGCHLD]);
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", d.pid())).unwrap();
    // Field 6 (session id), counted after the command name in parentheses.
    let sid = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(3)
        .unwrap()
        .to_string();
    let server = fork_server_of(d.pid()).map(program_of);
    let mut out = Vec::new();
    for (name, _) in PROBES {
        let id = f.enqueue(name);
        let r = f.wait_terminal(id);
        assert_eq!(r["status"], "succeeded", "{r}\n{}", f.logs(id));
        out.push((*name, f.logs(id)));
    }
    (out, sid, server)
}

/// The program a process runs (`/proc/PID/exe`).
fn program_of(pid: i32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe")).unwrap()
}

/// A copy of the shared `fleet` binary alone in a folder of its own (which lives as long as
/// the returned handle), as when only `fleet` was installed.
fn lone_fleet() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("fleet");
    std::fs::copy(fleet_bin(), &bin).unwrap();
    (dir, bin)
}

#[test]
fn forked_and_execd_shims_start_the_command_alike() {
    let (forked, forked_sid, program) = probe(&[], None);
    let (_lone_dir, lone) = lone_fleet();
    let (own, own_sid, own_program) = probe(&[], Some(lone.clone()));
    let (execd, execd_sid, no_server) = probe(&[("FLEET_FORK_SERVER", "0")], None);
    // Each path was the one meant: the fork server runs its own program beside `fleet`, or,
    // without one, is a copy of fleet's image; with no fork server every shim is exec'd.
    assert_eq!(
        program.as_deref(),
        Some(fleet_bin().with_file_name(FORK_SERVER_PROGRAM).as_path())
    );
    assert_eq!(own_program.as_deref(), Some(lone.as_path()));
    assert_eq!(no_server, None);
    let get = |logs: &[(&str, String)], name: &str| {
        logs.iter().find(|(n, _)| *n == name).unwrap().1.clone()
    };
    // A forked shim is named `shim-<run>`, an exec'd one is the fleet binary.
    assert_eq!(get(&forked, "parent"), "shim-5\n");
    assert_eq!(get(&own, "parent"), "shim-5\n");
    assert_eq!(get(&execd, "parent"), "fleet\n");
    let all = [
        ("forked", &forked, &forked_sid),
        ("forked from fleet's image", &own, &own_sid),
        ("exec'd", &execd, &execd_sid),
    ];
    // And none looks like the daemon or the fork server to `pgrep -f`/`pkill -f`: a forked
    // shim rewrites the command line it inherited.
    for (what, logs, _) in all {
        let cmdline = get(logs, "parent_cmdline");
        assert!(
            cmdline.contains(" shim ")
                && cmdline.contains("--run-id 6")
                && !cmdline.contains("daemon")
                && !cmdline.contains("forksrv"),
            "{what}: the shim's command line is {cmdline:?}"
        );
    }
    for (what, logs, daemon_sid) in all {
        assert_eq!(
            get(logs, "env"),
            "RUN=1 PROJECT=env NS=default ATTEMPT=1 OCC=unset GREETING=hi FROM_DAEMON=yes\n",
            "{what}"
        );
        // stdin, stdout, stderr, and the directory `ls` itself opened.
        assert_eq!(
            get(logs, "fds"),
            "0\n1\n2\n3\n",
            "{what}: descriptors leaked"
        );
        assert_eq!(
            get(logs, "signals"),
            "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n",
            "{what}: the command must start with no signal blocked or ignored"
        );
        let ids = get(logs, "ids");
        let ids: Vec<&str> = ids.split_whitespace().collect();
        assert_eq!(
            ids[0], ids[1],
            "{what}: the command leads its own process group"
        );
        assert_ne!(
            ids[2],
            daemon_sid.as_str(),
            "{what}: the shim has its own session"
        );
    }
}

/// The daemon's fork server: its child named `fleet-forksrv`.
fn fork_server_of(daemon: i32) -> Option<i32> {
    all_pids()
        .into_iter()
        .find(|&pid| is_fork_server(pid) && parent_of(pid) == Some(daemon))
}

#[test]
fn a_killed_fork_server_only_slows_the_daemon_down() {
    let f = Fleet::with(|dir| {
        let rec = dir.join("records");
        let mut t = String::from("max_concurrency = 3\n");
        for p in ["a", "b", "c"] {
            t += &format!(
                "[projects.{p}]\ncommand = {}\n",
                sh(&recorder_script(&rec, "0.05"))
            );
        }
        // Held open until the test lets it go: started through the fork server, it must finish
        // normally after the server is gone.
        t += &format!(
            "[projects.held]\ncommand = {}\n",
            sh(&format!(
                "while [ ! -e '{}' ]; do sleep 0.02; done",
                dir.join("GO").display()
            ))
        );
        t
    });
    let mut d = f.start_daemon();
    let server = fork_server_of(d.pid()).expect("the daemon should have a fork server");
    let held = f.enqueue("held");
    f.wait_status(held, "running");
    // A process of this test, found by its name and parent just above.
    send_signal(server, Signal::KILL).expect("SIGKILL to the fork server");
    f.wait_until(DEADLINE, "the fork server to be gone", || {
        process_gone(server)
    });
    let ids: Vec<i64> = (0..12).map(|i| f.enqueue(["a", "b", "c"][i % 3])).collect();
    for &id in &ids {
        let r = f.wait_terminal(id);
        assert_eq!(r["status"], "succeeded", "{r}");
    }
    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(r["status"], "succeeded", "{r}");
    d.assert_alive();
    assert!(
        d.stderr().contains("every shim from now on is exec'd"),
        "{}",
        d.stderr()
    );
    // And reaped: no zombie of it stays under the daemon.
    f.wait_until(DEADLINE, "the dead fork server to be reaped", || {
        !std::path::Path::new(&format!("/proc/{server}")).exists()
    });
    // Every run started exactly once, and the cap held.
    let records = read_records(&f.file("records"));
    for &id in &ids {
        let starts = records.iter().filter(|r| r.start && r.run_id == id).count();
        assert_eq!(starts, 1, "run {id} started {starts} times");
    }
    max_overlap(&records).check(3, &[]).unwrap();
}

#[test]
fn the_fork_server_ends_with_its_daemon() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    // Stopped with SIGTERM.
    let mut d = f.start_daemon();
    let server = fork_server_of(d.pid()).expect("the daemon should have a fork server");
    d.signal(Signal::TERM);
    f.wait_until(DEADLINE, "the daemon to stop", || d.try_exit().is_some());
    f.wait_until(Duration::from_secs(10), "the fork server to end", || {
        process_gone(server)
    });
    // Killed.
    let mut d = f.start_daemon();
    let server = fork_server_of(d.pid()).expect("the daemon should have a fork server");
    d.kill();
    f.wait_until(Duration::from_secs(10), "the fork server to end", || {
        process_gone(server)
    });
    // Not started when asked not to.
    let d = f.start_daemon_env(&[("FLEET_FORK_SERVER", "0")]);
    assert_eq!(fork_server_of(d.pid()), None);
}

/// The fork server's own memory (`RssAnon` of `/proc/PID/status`, in KiB).
fn anonymous_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Every shim is a copy of the fork server, so each fork copies the page tables of what the
/// server holds: it is forked before the config is read, and a large config must not make it
/// larger (a thousand projects took it from 1.5 to 5.7 MiB when it was forked after the load).
#[test]
fn the_fork_server_does_not_hold_the_config() {
    let server_kib = |toml: &str| {
        let f = Fleet::new(toml);
        let d = f.start_daemon();
        let server = fork_server_of(d.pid()).expect("the daemon should have a fork server");
        anonymous_kib(server)
    };
    let small = server_kib("[projects.p]\ncommand = [\"true\"]\n");
    let mut big = String::new();
    for i in 0..1000 {
        big += &format!(
            "[projects.p{i}]\ncommand = [\"true\", \"argument-{i}\"]\nenv = {{ A = \"{i}\" }}\nschedule = \"*/5 * * * *\"\n"
        );
    }
    let large = server_kib(&big);
    assert!(
        large <= small + 256,
        "the fork server holds {large} KiB with 1,000 projects against {small} KiB with one"
    );
}

/// A fork server that stops answering (here: SIGSTOP) must not freeze the daemon: after the
/// reply timeout it is abandoned and killed, the request it never read dies with it, and the run
/// is requeued as never started and then run once by an exec'd shim.
#[test]
fn a_stuck_fork_server_is_abandoned_and_the_run_still_runs_once() {
    let f = Fleet::with(|dir| {
        let rec = dir.join("records");
        format!(
            "[projects.p]\ncommand = {}\n",
            sh(&recorder_script(&rec, "0"))
        )
    });
    let mut d = f.start_daemon();
    let server = fork_server_of(d.pid()).expect("the daemon should have a fork server");
    // A process of this test, found by its name and parent just above.
    send_signal(server, Signal::STOP).expect("SIGSTOP to the fork server");
    let id = f.enqueue("p");
    let r = f.wait_terminal(id);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(
        r["attempt"], 1,
        "requeued as never started, same attempt: {r}"
    );
    d.assert_alive();
    assert!(
        d.stderr().contains("gave no answer"),
        "the daemon should say why it gave up on its fork server:\n{}",
        d.stderr()
    );
    f.wait_until(DEADLINE, "the stopped fork server to be killed", || {
        process_gone(server)
    });
    let records = read_records(&f.file("records"));
    let starts = records.iter().filter(|r| r.start && r.run_id == id).count();
    assert_eq!(starts, 1, "run {id} started {starts} times");
    // And the next run goes straight to an exec'd shim.
    let next = f.enqueue("p");
    assert_eq!(f.wait_terminal(next)["status"], "succeeded");
}

/// The reply timeout is a deadline, not a wait that starts over: signals that interrupt the wait
/// (here a reload every 300 ms, as a config management tool might send) must not keep the
/// daemon waiting for ever on a fork server that stopped answering.
#[test]
fn signals_do_not_stretch_the_wait_for_a_stuck_fork_server() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    let mut d = f.start_daemon();
    let server = fork_server_of(d.pid()).expect("the daemon should have a fork server");
    // A process of this test, found by its name and parent just above.
    send_signal(server, Signal::STOP).expect("SIGSTOP to the fork server");
    let id = f.enqueue("p");
    // Reloads keep coming until the run is through; past 30 s (six reply timeouts) the wait
    // was restarted by them.
    let start = std::time::Instant::now();
    while !is_terminal(&f.run(id)) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the run is still {} after 30 s of reloads: the daemon never gave up on its \
             stopped fork server\n{}",
            f.run(id)["status"],
            d.stderr()
        );
        d.signal(Signal::HUP);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(f.run(id)["status"], "succeeded");
    d.assert_alive();
    assert!(d.stderr().contains("gave no answer"), "{}", d.stderr());
}

/// A run whose command and environment are too large for one request to the fork server gets
/// an exec'd shim; the fork server stays in use for the next runs.
#[test]
fn an_oversized_run_is_execd_and_the_fork_server_stays() {
    // Two variables of 70 KiB: together above the fork server's 128 KiB, each below the
    // kernel's limit for one exec string.
    let big = "x".repeat(70 * 1024);
    let f = Fleet::new(&format!(
        "[projects.big]\nenv = {{ BIG = \"{big}\", BIG2 = \"{big}\" }}\n\
         command = [\"sh\", \"-c\", \"echo ${{#BIG}} ${{#BIG2}}\"]\n\
         [projects.small]\ncommand = [\"sh\", \"-c\", \"cat /proc/$PPID/comm\"]\n"
    ));
    let d = f.start_daemon();
    let server = fork_server_of(d.pid()).expect("the daemon should have a fork server");
    let id = f.enqueue("big");
    let r = f.wait_terminal(id);
    assert_eq!(r["status"], "succeeded", "{r}\n{}", d.stderr());
    assert_eq!(f.logs(id), format!("{0} {0}\n", big.len()));
    let small = f.enqueue("small");
    assert_eq!(f.wait_terminal(small)["status"], "succeeded");
    assert_eq!(f.logs(small), format!("shim-{small}\n"), "forked again");
    assert!(!process_gone(server), "the fork server must still be up");
    let log = d.stderr();
    assert!(log.contains("exec'ing this run's shim instead"), "{log}");
    assert!(!log.contains("fork server is gone"), "{log}");
}

#[test]
fn a_bad_fork_server_setting_is_refused_naming_it() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    for value in ["garbage", "off", ""] {
        let mut c = f.command();
        c.arg("daemon").env("FLEET_FORK_SERVER", value);
        let out = run_with_deadline(c, CMD_DEADLINE);
        assert_eq!(out.code(), Some(2), "FLEET_FORK_SERVER={value:?}: {out:?}");
        assert!(
            out.stderr.contains("FLEET_FORK_SERVER must be 0 or 1"),
            "{out:?}"
        );
        assert_eq!(out.stderr.lines().count(), 1, "one line: {out:?}");
    }
}

/// A fork server program that announces this version number with another build's identity:
/// a stale `fleet-forksrv` of another commit, not rebuilt with `fleet`.
const SAME_VERSION_OTHER_BUILD: &str = concat!(
    "#!/usr/bin/env python3\nimport socket, time\nsocket.socket(fileno=3).send(b'",
    env!("CARGO_PKG_VERSION"),
    "+0123456789abcdef program')\ntime.sleep(60)\n"
);

/// A `fleet` installed without the fork server's program, or beside one it cannot use, still
/// forks its shims — from its own image — and says why in its log; a program it gave up on is
/// killed and reaped, never left running or as a zombie.
#[test]
fn a_missing_or_unusable_fork_server_program_falls_back_to_fleets_own_image() {
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("missing", None, "No such file or directory"),
        (
            "of another version",
            Some(
                "#!/usr/bin/env python3\nimport socket, time\n\
                 socket.socket(fileno=3).send(b'0.0.1 program')\ntime.sleep(60)\n",
            ),
            "is version 0.0.1, not ",
        ),
        (
            "of this version but another build",
            Some(SAME_VERSION_OTHER_BUILD),
            "(another build)",
        ),
        (
            "exits at once",
            Some("#!/bin/sh\nexit 0\n"),
            "exited before serving",
        ),
        (
            "answers nonsense",
            Some(
                "#!/usr/bin/env python3\nimport socket, time\n\
                 socket.socket(fileno=3).send(b'hello')\ntime.sleep(60)\n",
            ),
            "not a fork server's hello",
        ),
        ("not executable", Some("-"), "Permission denied"),
    ];
    for (what, program, reason) in cases {
        let (dir, lone) = lone_fleet();
        let beside = dir.path().join(FORK_SERVER_PROGRAM);
        match program {
            None => {}
            Some("-") => std::fs::write(&beside, "not a program").unwrap(),
            Some(text) => {
                std::fs::write(&beside, text).unwrap();
                std::fs::set_permissions(
                    &beside,
                    std::os::unix::fs::PermissionsExt::from_mode(0o755),
                )
                .unwrap();
            }
        }
        let f = Fleet::new("[projects.p]\ncommand = [\"sh\", \"-c\", \"cat /proc/$PPID/comm\"]\n")
            .with_binary(lone.clone());
        let d = f.start_daemon();
        let server = fork_server_of(d.pid()).unwrap_or_else(|| panic!("{what}: no fork server"));
        assert_eq!(
            program_of(server),
            lone,
            "{what}: the server is fleet's own image"
        );
        let id = f.enqueue("p");
        assert_eq!(f.wait_terminal(id)["status"], "succeeded", "{what}");
        assert_eq!(f.logs(id), format!("shim-{id}\n"), "{what}: forked");
        let log = d.stderr();
        let line = log
            .lines()
            .find(|l| l.contains("forks shims from fleet's own image, which is slower"))
            .unwrap_or_else(|| panic!("{what}: the daemon should say why:\n{log}"));
        assert!(
            line.contains(&beside.display().to_string()) && line.contains(reason),
            "{what}: {line}"
        );
        // The daemon's only child is the fork server that serves: the program it gave up on
        // was killed and reaped.
        let children: Vec<i32> = all_pids()
            .into_iter()
            .filter(|&pid| parent_of(pid) == Some(d.pid()))
            .collect();
        assert_eq!(children, vec![server], "{what}: the daemon's children");
    }
}

/// The parent pid of `pid` (field 4 of `/proc/PID/stat`), if it still exists.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The fork server's program is started by the daemon only: run by hand it says so in one line
/// and exits 2, whatever it is given.
#[test]
fn the_fork_server_program_refuses_to_run_by_hand() {
    let program = fleet_bin().with_file_name(FORK_SERVER_PROGRAM);
    for args in [&[][..], &["--help"][..], &["--serve-fork-requests"][..]] {
        let mut c = std::process::Command::new(&program);
        c.args(args);
        let out = run_with_deadline(c, CMD_DEADLINE);
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("`fleet daemon` starts this program"),
            "{out:?}"
        );
    }
}

/// The pid a run's command printed first in its log (its `$PPID`: the run's shim).
fn shim_in_log(f: &Fleet, id: i64) -> i32 {
    let log = f.logs(id);
    log.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("run {id}'s log has no pid first: {log:?}"))
}

/// A process's short name (`/proc/PID/comm`), empty once it is gone.
fn comm_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_default()
}

/// Runs of two projects, one after the other: both print their shim's pid and exit with their
/// own status.
const ONE_AFTER_THE_OTHER: &str = r#"
[projects.first]
command = ["sh", "-c", "echo $PPID; exit 3"]
[projects.second]
command = ["sh", "-c", "echo $PPID; sleep 0.3; exit 4"]
"#;

/// A forked shim whose run is over takes the next run instead of exiting, and each run still
/// ends with its own command's status and log, under its own name.
#[test]
fn a_shim_whose_run_ended_supervises_the_next_one() {
    let f = Fleet::new(ONE_AFTER_THE_OTHER);
    let _d = f.start_daemon();
    let a = f.enqueue("first");
    let r = f.wait_terminal(a);
    assert_eq!(r["exit_code"], 3, "{r}");
    let shim = shim_in_log(&f, a);
    f.wait_until(DEADLINE, "the shim to wait for another run", || {
        comm_of(shim) == "shim-idle"
    });
    let b = f.enqueue("second");
    f.wait_until(DEADLINE, "the shim to take the next run", || {
        comm_of(shim) == format!("shim-{b}") || process_gone(shim)
    });
    let r = f.wait_terminal(b);
    assert_eq!(r["exit_code"], 4, "{r}\n{}", f.diagnostics());
    assert_eq!(shim_in_log(&f, b), shim, "the second run had another shim");
}

/// A termination signal that reached a shim between two runs (meant for the run that ended, or
/// sent by hand to the idle process) is cleared before the shim takes its next run: that run is
/// not ended by it.
#[test]
fn a_signal_sent_between_runs_never_reaches_the_next_run() {
    let f = Fleet::new(ONE_AFTER_THE_OTHER);
    let _d = f.start_daemon();
    let a = f.enqueue("first");
    f.wait_terminal(a);
    let shim = shim_in_log(&f, a);
    f.wait_until(DEADLINE, "the shim to wait for another run", || {
        comm_of(shim) == "shim-idle"
    });
    // Blocked in the shim, so pending until it looks.
    send_signal(shim, Signal::TERM).unwrap();
    send_signal(shim, Signal::INT).unwrap();
    let b = f.enqueue("second");
    let r = f.wait_terminal(b);
    assert_eq!(r["status"], "failed", "ended by a stale signal: {r}");
    assert_eq!(r["exit_code"], 4, "ended by a stale signal: {r}");
    assert_eq!(shim_in_log(&f, b), shim, "the second run had another shim");
}

/// A shim waiting for a run exits when nothing comes for a while, and at once when its daemon
/// stops: no process of fleet's outlives the daemon but the shims of runs still going.
#[test]
fn idle_shims_end_after_a_while_and_with_their_daemon() {
    let f = Fleet::new(ONE_AFTER_THE_OTHER);
    let mut d = f.start_daemon();
    let a = f.enqueue("first");
    f.wait_terminal(a);
    let shim = shim_in_log(&f, a);
    f.wait_until(DEADLINE, "the shim to wait for another run", || {
        comm_of(shim) == "shim-idle"
    });
    // Let go by the fork server after its idle time (ten seconds), the daemon still running.
    f.wait_until(Duration::from_secs(30), "the idle shim to exit", || {
        process_gone(shim)
    });
    d.assert_alive();
    // And with the daemon.
    let b = f.enqueue("first");
    f.wait_terminal(b);
    let shim = shim_in_log(&f, b);
    f.wait_until(DEADLINE, "the shim to wait for another run", || {
        comm_of(shim) == "shim-idle"
    });
    d.signal(Signal::TERM);
    f.wait_until(DEADLINE, "the daemon to stop", || d.try_exit().is_some());
    f.wait_until(Duration::from_secs(5), "the idle shim to exit", || {
        process_gone(shim)
    });
    // And with a daemon killed outright.
    let mut d = f.start_daemon();
    let c = f.enqueue("first");
    f.wait_terminal(c);
    let shim = shim_in_log(&f, c);
    f.wait_until(DEADLINE, "the shim to wait for another run", || {
        comm_of(shim) == "shim-idle"
    });
    d.kill();
    f.wait_until(Duration::from_secs(5), "the idle shim to exit", || {
        process_gone(shim)
    });
}

/// A run that another program ended in the database while its command ran keeps its seat until
/// its shim is done with it — and no longer: the shim lives on, waiting for another run, and
/// that must not hold the seat. Later runs under the cap start at once, on that same shim.
#[test]
fn a_run_ended_by_another_writer_frees_its_seat_when_its_shim_is_done_with_it() {
    // The first run's command lasts until the test creates `go`, so that the next run is queued
    // while it runs however slow the machine is.
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 1\n\
             [projects.long]\ncommand = {}\n\
             [projects.next]\ncommand = [\"sh\", \"-c\", \"echo $PPID\"]\n",
            sh(&format!(
                "echo $PPID; while [ ! -e {} ]; do sleep 0.05; done",
                shell_quote(&dir.join("go"))
            )),
        )
    });
    let _d = f.start_daemon();
    let a = f.enqueue("long");
    f.wait_run(a, "running", |r| r["status"] == "running");
    let db = rusqlite::Connection::open(f.state_dir().join("fleet.db")).unwrap();
    db.busy_timeout(Duration::from_secs(30)).unwrap();
    db.execute("UPDATE runs SET status = 'failed' WHERE id = ?1", [a])
        .unwrap();
    // `running` says that the command was started, not that it has printed its first line.
    f.wait_until(
        DEADLINE,
        "the first run's command to print its shim's pid",
        || f.logs(a).contains('\n'),
    );
    let shim = shim_in_log(&f, a);
    // Queued while the first run's command still runs: it waits for that command's seat.
    let b = f.enqueue("next");
    assert_stays_queued(
        &f,
        b,
        "the first run's command still runs and holds its seat",
    );
    std::fs::write(f.file("go"), "").unwrap();
    let r = f.wait_terminal(b);
    assert_eq!(r["status"], "succeeded", "{r}");
    // The first run's shim offers itself for another run just after it has told the daemon it
    // is done (its report pipe closed), so the daemon may ask the fork server for a shim before
    // that offer is in: then a new shim takes the run while the first one waits. Either way the
    // run did not wait for the first run's shim to exit (it would wait ten seconds, the time an
    // idle shim is kept).
    let b_shim = shim_in_log(&f, b);
    assert!(
        b_shim == shim || !process_gone(shim),
        "run {b} waited until the first run's shim had exited\n{}",
        f.diagnostics()
    );
    // Queued after: nothing holds the seat any more, and the run goes to a shim waiting for
    // one: the first run's (the other, when there is one, was forked for b).
    let waiting = if b_shim == shim {
        vec![shim]
    } else {
        vec![shim, b_shim]
    };
    f.wait_until(DEADLINE, "the shims to wait for another run", || {
        waiting.iter().all(|&p| comm_of(p) == "shim-idle")
    });
    let c = f.enqueue("next");
    let r = f.wait_terminal(c);
    assert_eq!(r["status"], "succeeded", "{r}");
    let c_shim = shim_in_log(&f, c);
    assert!(
        waiting.contains(&c_shim),
        "run {c} waited until the first run's shim had exited (it ran on {c_shim}, not on a \
         waiting shim: {waiting:?})\n{}",
        f.diagnostics()
    );
}

/// A command that changes its shim's own settings through `$PPID` — its open-file limit, as
/// `prlimit --pid` would, or what its core dumps hold (`/proc/PID/coredump_filter`, which any
/// process of the same user may write) — changes them for that shim only: the shim is not
/// reused, and the next run's command starts with the daemon's settings, under another shim.
#[test]
fn a_shim_whose_settings_a_command_changed_is_not_reused() {
    let f = Fleet::new(
        r#"
max_concurrency = 1
[projects.limit]
command = ["python3", "-c", "import os, resource; print(os.getppid()); resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (40, 40))"]
[projects.dumps]
command = ["sh", "-c", "echo $PPID; echo 0x1 > /proc/$PPID/coredump_filter"]
[projects.show]
command = ["sh", "-c", "echo $PPID; ulimit -n; cat /proc/self/coredump_filter"]
"#,
    );
    let _d = f.start_daemon();
    let settings = |id: i64| f.logs(id).lines().skip(1).collect::<Vec<_>>().join(" ");
    for change in ["limit", "dumps"] {
        let before = f.enqueue("show");
        assert_eq!(f.wait_terminal(before)["status"], "succeeded");
        let changed = f.enqueue(change);
        let r = f.wait_terminal(changed);
        assert_eq!(r["status"], "succeeded", "{r}\n{}", f.logs(changed));
        let after = f.enqueue("show");
        let r = f.wait_terminal(after);
        assert_eq!(r["status"], "succeeded", "{r}\n{}", f.logs(after));
        assert_eq!(
            settings(after),
            settings(before),
            "{change}: the changed setting reached the next run"
        );
        assert_ne!(shim_in_log(&f, after), shim_in_log(&f, changed), "{change}");
    }
}

/// A command that changes the fork server's settings through its grandparent's pid (the
/// server is its shim's parent) must not pass them on to the shims forked after: the server
/// refuses to fork with them and stops, and every later shim is exec'd from the daemon, with
/// the daemon's settings.
#[test]
fn a_fork_server_whose_settings_a_command_changed_forks_no_more() {
    let f = Fleet::new(
        r#"
max_concurrency = 2
[projects.limit]
command = ["python3", "-c", "import os, resource; s = open(f'/proc/{os.getppid()}/status').read(); server = int(s.split('PPid:')[1].split()[0]); resource.prlimit(server, resource.RLIMIT_NOFILE, (40, 40))"]
[projects.show]
max_parallel = 2
command = ["sh", "-c", "ulimit -n; sleep 0.5"]
"#,
    );
    let d = f.start_daemon();
    let before = f.enqueue("show");
    assert_eq!(f.wait_terminal(before)["status"], "succeeded");
    let limit = f.enqueue("limit");
    let r = f.wait_terminal(limit);
    assert_eq!(r["status"], "succeeded", "{r}\n{}", f.logs(limit));
    // Two at once: at most one goes to a shim waiting for a run; the other needs a new one.
    let runs = [f.enqueue("show"), f.enqueue("show")];
    for id in runs {
        let r = f.wait_terminal(id);
        assert_eq!(r["status"], "succeeded", "{r}\n{}", f.diagnostics());
        assert_eq!(
            f.logs(id),
            f.logs(before),
            "run {id} started with the changed limit"
        );
    }
    let log = d.stderr();
    assert!(
        log.contains("were changed from outside since it started"),
        "the fork server should say why it stopped:\n{log}"
    );
}

/// A shim stopped while it waits for a run (`kill -STOP`) costs the fork server one short wait
/// and is let go: the runs go to other shims at once, the fork server stays, and the stopped
/// shim, once continued, exits without starting anything.
#[test]
fn a_stopped_idle_shim_is_let_go_and_the_runs_go_on() {
    let f = Fleet::new(
        r#"
max_concurrency = 2
[projects.p]
max_parallel = 2
command = ["sh", "-c", "echo $PPID"]
"#,
    );
    let d = f.start_daemon();
    let first = f.enqueue("p");
    f.wait_terminal(first);
    let stopped = shim_in_log(&f, first);
    f.wait_until(DEADLINE, "the shim to wait for another run", || {
        comm_of(stopped) == "shim-idle"
    });
    send_signal(stopped, Signal::STOP).unwrap();
    let runs = [f.enqueue("p"), f.enqueue("p")];
    for id in runs {
        let r = f.wait_terminal(id);
        assert_eq!(r["status"], "succeeded", "{r}\n{}", f.diagnostics());
        assert_ne!(shim_in_log(&f, id), stopped, "the stopped shim ran {id}");
    }
    let log = d.stderr();
    assert!(
        !log.contains("the fork server is gone"),
        "one stopped shim cost the fork server:\n{log}"
    );
    send_signal(stopped, Signal::CONT).unwrap();
    f.wait_until(DEADLINE, "the stopped shim to exit once continued", || {
        process_gone(stopped)
    });
    // And the fork server still serves: a later run is forked or handed over, not exec'd.
    let later = f.enqueue("p");
    f.wait_terminal(later);
    assert!(
        comm_of(shim_in_log(&f, later)).starts_with("shim-"),
        "a later run's shim is not the fork server's"
    );
}
