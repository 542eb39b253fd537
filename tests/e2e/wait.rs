//! `fleet wait` and `fleet enqueue --wait`: the exit status is the command's, after its
//! retries, whatever happens to the daemon meanwhile.

use std::process::Command;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::common::*;

/// Runs `cmd` to its end (with the harness's deadline) on a thread of its own: for a `fleet
/// wait` the test acts on while it blocks.
pub fn bg(cmd: Command) -> JoinHandle<Output> {
    std::thread::spawn(move || run_with_deadline(cmd, CMD_DEADLINE))
}

/// A project that waits for `release` to exist in the fleet's folder, writes `ended`, and
/// exits 3.
fn held_exit_3(dir: &std::path::Path) -> String {
    format!(
        "[projects.held]\ncommand = {}\n",
        sh(&format!(
            "while [ ! -e {rel} ]; do sleep 0.02; done; touch {end}; exit 3",
            rel = shell_quote(&dir.join("release")),
            end = shell_quote(&dir.join("ended")),
        ))
    )
}

#[test]
fn enqueue_wait_exits_with_the_commands_code() {
    let f = Fleet::new(&format!("[projects.three]\ncommand = {}\n", sh("exit 3")));
    let _d = f.start_daemon();
    let out = f.cmd(&["enqueue", "--wait", "three"]);
    assert_eq!(out.code(), Some(3), "{out:?}");
    let mut lines = out.stdout.lines();
    let id: i64 = lines.next().unwrap().parse().expect("the run id first");
    let last = lines.next().expect("the status line");
    assert!(
        last.contains(&format!("run {id}"))
            && last.contains("failed")
            && last.contains("exit code 3"),
        "{last}"
    );
}

/// The wait reads the database, not the daemon: the daemon is SIGKILLed while the command
/// runs, the command ends while no daemon is up (nobody can record it yet), and the wait
/// still ends with 3 once a new daemon has adopted the run and recorded its exit.
#[test]
fn enqueue_wait_survives_a_daemon_killed_and_restarted() {
    let f = Fleet::with(held_exit_3);
    let mut d = f.start_daemon();
    let mut cmd = f.command();
    cmd.args(["enqueue", "--wait", "held"]);
    let waiting = bg(cmd);
    f.wait_until(DEADLINE, "the run to be running", || {
        f.runs().iter().any(|r| r["status"] == "running")
    });
    d.kill();
    std::fs::write(f.file("release"), "").unwrap();
    f.wait_until(DEADLINE, "the command to end", || f.file("ended").exists());
    // Nothing has recorded the end yet: the wait must still be waiting.
    assert!(
        !waiting.is_finished(),
        "the wait ended with no daemon to record the exit"
    );
    let _d2 = f.start_daemon();
    let out = waiting.join().unwrap();
    assert_eq!(out.code(), Some(3), "{out:?}\n{}", f.diagnostics());
    assert!(out.stdout.contains("exit code 3"), "{out:?}");
}

/// The daemon is SIGKILLed and the run's shim killed with it: the restarted daemon finds the run
/// `lost` and retries it, and the wait follows to the retry's exit code.
#[test]
fn enqueue_wait_follows_a_lost_run_to_its_retry_across_a_restart() {
    let f = Fleet::new(&format!(
        "[projects.flaky]\ncommand = {}\nretries = 1\nretry_backoff = \"0s\"\n",
        sh("if [ \"$FLEET_ATTEMPT\" = 1 ]; then sleep 300; fi; exit 3")
    ));
    let mut d = f.start_daemon();
    let mut cmd = f.command();
    cmd.args(["enqueue", "--wait", "flaky"]);
    let waiting = bg(cmd);
    let mut id = 0;
    f.wait_until(DEADLINE, "the run to be running", || {
        let runs = f.runs();
        id = runs.first().and_then(|r| r["id"].as_i64()).unwrap_or(0);
        runs.iter().any(|r| r["status"] == "running")
    });
    d.kill();
    let shims: Vec<i32> = marked_pids(&f.marker)
        .into_iter()
        .filter(|&p| shim_run_id(p) == Some(id))
        .collect();
    assert_eq!(shims.len(), 1, "one shim for run {id}: {shims:?}");
    send_signal(shims[0], Signal::KILL).unwrap();
    f.wait_until(DEADLINE, "the shim to be gone", || process_gone(shims[0]));
    assert!(
        !waiting.is_finished(),
        "the wait ended with no daemon to record anything"
    );
    let _d2 = f.start_daemon();
    let out = waiting.join().unwrap();
    assert_eq!(out.code(), Some(3), "{out:?}\n{}", f.diagnostics());
    assert!(out.stdout.contains("after 2 attempts"), "{out:?}");
    assert_eq!(status_of(&f.run(id)), "lost");
}

#[test]
fn wait_follows_retries_to_the_last_attempt() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.flaky]\ncommand = {}\nretries = 2\nretry_backoff = \"0s\"\n",
            sh(&format!(
                "if [ -e {m} ]; then exit 0; fi; touch {m}; exit 5",
                m = shell_quote(&dir.join("first-done"))
            ))
        )
    });
    let id = f.enqueue("flaky");
    let mut cmd = f.command();
    cmd.args(["wait", &id.to_string()]);
    let waiting = bg(cmd);
    let _d = f.start_daemon();
    let out = waiting.join().unwrap();
    assert_eq!(out.code(), Some(0), "{out:?}\n{}", f.diagnostics());
    assert!(out.stdout.contains("succeeded"), "{out:?}");
    assert!(out.stdout.contains("after 2 attempts"), "{out:?}");
}

#[test]
fn a_signal_is_128_plus_its_number_and_a_cancel_is_1_with_the_reason() {
    let f = Fleet::new(&format!(
        "[projects.killed]\ncommand = {}\n[projects.queued]\ncommand = [\"true\"]\n",
        sh("kill -USR1 $$")
    ));
    let queued = f.enqueue("queued");
    f.cmd_ok(&["cancel", &queued.to_string()]);
    let out = f.cmd(&["wait", &queued.to_string()]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("cancelled by operator"), "{out:?}");

    let _d = f.start_daemon();
    let out = f.cmd(&["enqueue", "--wait", "killed"]);
    assert_eq!(out.code(), Some(128 + libc::SIGUSR1), "{out:?}");
}

#[test]
fn several_ids_exit_with_the_first_failure_in_the_order_given() {
    let f = Fleet::new(&format!(
        "[projects.four]\ncommand = {}\n[projects.six]\ncommand = {}\n[projects.ok]\ncommand = [\"true\"]\n",
        sh("exit 4"),
        sh("exit 6")
    ));
    let (four, six, ok) = (f.enqueue("four"), f.enqueue("six"), f.enqueue("ok"));
    let _d = f.start_daemon();
    let out = f.cmd(&["wait", &ok.to_string(), &six.to_string(), &four.to_string()]);
    assert_eq!(out.code(), Some(6), "{out:?}");
    assert_eq!(out.stdout.lines().count(), 3, "one line per run: {out:?}");
    let out = f.cmd(&["wait", &four.to_string(), &six.to_string()]);
    assert_eq!(out.code(), Some(4), "{out:?}");
}

#[test]
fn timeout_exits_124_and_leaves_the_run_alone() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    // No daemon: the run stays queued.
    let id = f.enqueue("p");
    let start = std::time::Instant::now();
    let out = f.cmd(&["wait", "--timeout", "300ms", &id.to_string()]);
    assert_eq!(out.code(), Some(124), "{out:?}");
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(out.stderr.contains("timed out"), "{out:?}");
    assert_eq!(status_of(&f.run(id)), "queued");
    let out = f.cmd(&["enqueue", "--wait", "--timeout", "200ms", "p"]);
    assert_eq!(out.code(), Some(124), "{out:?}");
}

#[test]
fn an_unknown_id_is_exit_2() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    let out = f.cmd(&["wait", "42"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    let id = f.enqueue("p");
    let out = f.cmd(&["wait", &id.to_string(), "4242"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("unknown run id 4242"), "{out:?}");
}

/// A wait whose reader left stops at once with 141, as every fleet command does, instead of
/// waiting (here, for a run no daemon will ever start) until its timeout.
#[test]
fn a_wait_whose_reader_left_stops_with_141() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    let id = f.enqueue("p");
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    drop(read);
    let mut cmd = f.command();
    cmd.args(["wait", "--timeout", "20s", &id.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(write))
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut status = None;
    f.wait_until(DEADLINE, "the wait to end", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    assert_eq!(status.unwrap().code(), Some(141));
    assert_eq!(status_of(&f.run(id)), "queued");
}

/// A command that cannot be started: exit 1, and the reason said once, without a doubled
/// `fleet: ` prefix (the reason the run records starts with one already).
#[test]
fn a_command_that_cannot_start_is_said_once() {
    let f = Fleet::new("[projects.nope]\ncommand = [\"fleet-test-no-such-program\"]\n");
    let _d = f.start_daemon();
    let out = f.cmd(&["enqueue", "--wait", "nope"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("could not start"), "{out:?}");
    assert!(out.stderr.starts_with("fleet: run "), "{out:?}");
    assert!(!out.stderr.contains("fleet: fleet:"), "{out:?}");
    assert_eq!(out.stderr.matches("fleet: ").count(), 1, "{out:?}");
}
