//! Output into a pipe whose reader left. A command whose stdout reader is gone stops at once,
//! prints nothing, and exits 141 (what a shell shows for `cat` in the same place); one that
//! fails while its stderr reader is gone keeps its exit status; the daemon outlives a stderr
//! nobody reads. Never a panic (exit 101), never an error blaming a file.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::pipes::{open_pipe, run_closed, Closed};
use crate::common::*;

/// What every command exits with when the reader of its stdout left.
const READER_GONE: i32 = 141;

fn assert_quiet_141(f: &Fleet, args: &[&str]) {
    let mut c = f.command();
    c.args(args);
    let end = run_closed(c, Closed::Stdout, &f.file("stderr.txt"));
    assert_eq!(
        end.code(),
        Some(READER_GONE),
        "fleet {args:?} into a closed pipe: {end:?}"
    );
    assert_eq!(end.other, "", "fleet {args:?} should say nothing on stderr");
}

#[test]
fn every_command_into_a_closed_stdout_exits_141_quietly() {
    let f = Fleet::new(
        "[projects.hello]\ncommand = [\"echo\", \"hi\"]\n\
         [projects.waits]\ncommand = [\"true\"]\n",
    );
    // Without a daemon: enqueue and cancel act, then find nobody reading their answer.
    let waiting = f.enqueue("waits");
    assert_quiet_141(&f, &["cancel", &waiting.to_string()]);
    assert_eq!(status_of(&f.run(waiting)), "cancelled");
    assert_quiet_141(&f, &["enqueue", "waits"]);
    assert_eq!(
        f.runs().len(),
        2,
        "the run is queued even though nobody read its id"
    );
    for _ in 0..3 {
        f.enqueue("hello");
    }

    let _d = f.start_daemon();
    let id = f.enqueue("hello");
    f.wait_status(id, "succeeded");
    let id = id.to_string();
    for args in [
        &["runs"][..],
        &["runs", "--limit", "1000"],
        &["runs", "--json"],
        &["status"],
        &["status", "--json"],
        &["check"],
        &["check", "--json"],
        &["logs", &id],
        &["logs", "--follow", &id],
        &["validate"],
        &["reload"],
        &["--help"],
        &["runs", "--help"],
        &["--version"],
    ] {
        assert_quiet_141(&f, args);
    }
}

#[test]
fn a_failure_with_a_closed_stderr_keeps_its_exit_status() {
    let f = Fleet::new("[projects.hello]\ncommand = [\"echo\", \"hi\"]\n");
    let id = f.enqueue("hello");
    f.cmd_ok(&["cancel", &id.to_string()]);
    for (args, code) in [
        (&["enqueue", "nosuchproject"][..], 2),
        (&["logs", "99999"], 2),
        (&["runs", "--status", "bogus"], 2),
        (&["runs", "--status", "bogus", "--json"], 2),
        (&["runs", "--limit", "many"], 2),
        (&["cancel", &id.to_string()], 1),
    ] {
        for closed in [Closed::Stderr, Closed::Both] {
            let mut c = f.command();
            c.args(args);
            let end = run_closed(c, closed, &f.file("stdout.txt"));
            assert_eq!(
                end.code(),
                Some(code),
                "fleet {args:?}, {closed:?} closed: {end:?}"
            );
        }
    }
    // Every problem of an invalid config goes to stderr.
    f.write_config("[projects.hello]\ncommand = [\"echo\"]\ntimout = \"1s\"\n");
    let mut c = f.command();
    c.arg("validate");
    let end = run_closed(c, Closed::Stderr, &f.file("stdout.txt"));
    assert_eq!(end.code(), Some(2), "{end:?}");
}

#[test]
fn logs_piped_into_head_exits_quietly() {
    // Far more than a pipe holds, so `fleet logs` is still writing when `head` leaves.
    let f = Fleet::new("[projects.chatty]\ncommand = [\"seq\", \"1\", \"300000\"]\n");
    let d = f.start_daemon();
    let id = f.enqueue("chatty");
    f.wait_status(id, "succeeded");
    drop(d);
    let rc = f.file("rc");
    let script = format!(
        "{{ {fleet} --config {config} logs {id}; echo $? > {rc}; }} | head -n 1",
        fleet = shell_quote(&fleet_bin()),
        config = shell_quote(&f.config),
        rc = shell_quote(&rc),
    );
    let mut c = Command::new("sh");
    c.args(["-c", &script])
        .env(MARKER_VAR, &f.marker)
        .env_remove("FLEET_CONFIG");
    let out = run_with_deadline(c, CMD_DEADLINE);
    assert_eq!(out.stdout, "1\n", "{out:?}");
    assert_eq!(out.stderr, "", "nothing on stderr: {out:?}");
    let code = std::fs::read_to_string(&rc).unwrap();
    assert_eq!(code.trim(), READER_GONE.to_string(), "{out:?}");
}

#[test]
fn follow_notices_its_reader_leaving_while_the_run_is_silent() {
    let f = Fleet::new(&format!(
        "[projects.quiet]\ncommand = {}\n",
        sh("echo first; exec sleep 600")
    ));
    let _d = f.start_daemon();
    let id = f.enqueue("quiet");
    f.wait_until(DEADLINE, "the run to write its first line", || {
        f.logs(id).contains("first")
    });
    let (read, write) = open_pipe();
    let mut c = f.command();
    c.args(["logs", "--follow", &id.to_string()])
        .stdin(Stdio::null())
        .stdout(write)
        .stderr(std::fs::File::create(f.file("follow.stderr")).unwrap());
    let mut child = c.spawn().expect("fleet logs --follow");
    drop(c);
    // Read what it printed, then leave, as `head -n 1` does.
    let mut reader = std::fs::File::from(read);
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("first\n") {
        let n = reader.read(&mut buf).expect("read the pipe");
        assert!(n > 0, "fleet logs --follow closed its stdout early");
        seen.extend_from_slice(&buf[..n]);
    }
    drop(reader);
    // The run writes nothing more for ten minutes: only a check of the pipe itself can notice.
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fleet logs --follow kept following for 20 s after its reader left");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(READER_GONE), "{status}");
    let stderr = std::fs::read_to_string(f.file("follow.stderr")).unwrap();
    assert_eq!(stderr, "", "nothing on stderr");
}

#[test]
fn daemon_survives_a_closed_stderr() {
    let f = Fleet::new("[projects.hello]\ncommand = [\"echo\", \"hi\"]\n");
    let mut c = f.command();
    // Debug logging: a line at every step, each one a write into the closed pipe.
    c.arg("daemon").env("RUST_LOG", "debug");
    let closed = || Stdio::from(super::pipes::closed_pipe());
    c.stdin(Stdio::null()).stdout(closed()).stderr(closed());
    let mut child = c.spawn().expect("fleet daemon");
    drop(c);
    let pid = child.id() as i64;
    f.wait_until(DEADLINE, "the daemon to hold the state directory", || {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the daemon died of its closed stderr: {st}");
        }
        let s = f.status();
        s["daemon"]["pid"].as_i64() == Some(pid) && s["daemon"]["epoch"].as_i64().is_some()
    });
    let ids: Vec<i64> = (0..3).map(|_| f.enqueue("hello")).collect();
    for id in ids {
        f.wait_status(id, "succeeded");
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the daemon died of its closed stderr"
    );
    send_signal(pid as i32, Signal::TERM).expect("SIGTERM to the daemon");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the daemon did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status}");
}
