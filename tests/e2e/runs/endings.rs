//! How a run ends: a failing command's exit code, a timeout, what the command leaves in its
//! process group, a cancel (queued or running), SIGTERM reaching a bare program, and retries.
//! A terminal status describes the world: the process group is gone when it is written.

use std::time::Duration;

use crate::common::*;

fn read_pid(path: &std::path::Path, f: &Fleet) -> i32 {
    let mut pid = 0;
    f.wait_until(DEADLINE, &format!("pid file {}", path.display()), || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid > 0
    });
    pid
}

/// Waits (briefly: the status is written once the process is known gone) for `pid` to be gone.
fn wait_gone(f: &Fleet, pid: i32, what: &str) {
    f.wait_until(
        Duration::from_secs(15),
        &format!("{what} (pid {pid}) to be gone"),
        || process_gone(pid),
    );
}
#[test]
fn failing_command_ends_failed_with_its_exit_code() {
    let f = Fleet::new(&format!(
        "[projects.fails]\ncommand = {}\n",
        sh("echo about to fail; exit 7")
    ));
    let _d = f.start_daemon();
    let id = f.enqueue("fails");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "failed", "{r}");
    assert_eq!(r["exit_code"], 7, "{r}");
    assert!(f.logs(id).contains("about to fail"));
}

#[test]
fn timeout_ends_timed_out_and_kills_the_whole_process_group() {
    let f = Fleet::with(|dir| {
        let pidfile = dir.join("grandchild.pid");
        format!(
            "[projects.sleeper]\ncommand = {}\ntimeout = \"1s\"\nkill_grace = \"1s\"\n",
            sh(&format!(
                "sleep 300 & echo $! > '{}'; sleep 300",
                pidfile.display()
            ))
        )
    });
    let _d = f.start_daemon();
    let id = f.enqueue("sleeper");
    let running = f.wait_run(id, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    let pid = running["pid"].as_i64().unwrap() as i32;
    let grandchild = read_pid(&f.file("grandchild.pid"), &f);
    assert!(
        !process_gone(grandchild),
        "the grandchild should be alive while the run is"
    );

    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "timed_out", "{r}");
    assert_eq!(r["pid"].as_i64(), Some(pid as i64), "{r}");
    let (started, finished) = (
        r["started_at"].as_str().unwrap(),
        r["finished_at"].as_str().unwrap(),
    );
    assert!(started < finished, "{r}");
    // `timed_out` describes the world: the process group is gone once it is written (poll anyway,
    // to tolerate /proc lag, with a short deadline).
    wait_gone(&f, pid, "the timed-out command");
    wait_gone(&f, grandchild, "the timed-out command's grandchild");
    assert!(
        group_members(pid).is_empty(),
        "process group {pid} still has members"
    );
}

/// A command that exits leaving a background child behind: the run ends when the command does,
/// and what it left in its process group is killed (a status describes the world).
#[test]
fn leftovers_in_the_process_group_are_killed_when_the_command_exits() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.leaver]\ncommand = {}\n",
            sh(&format!(
                "sleep 300 & echo $! > '{}'; echo leaving",
                dir.join("grandchild.pid").display()
            ))
        )
    });
    let _d = f.start_daemon();
    let id = f.enqueue("leaver");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    let grandchild = read_pid(&f.file("grandchild.pid"), &f);
    wait_gone(&f, grandchild, "the background child the command left");
    assert_eq!(f.logs(id), "leaving\n");
}

/// A command that starts processes outside its process group (a new session by `setsid`, with
/// a child of its own) and exits: they are ended too before the run's end is recorded, since
/// the shim is their subreaper — so a retry could never run beside them. The shim's log says
/// how many it found.
#[test]
fn processes_that_left_the_process_group_are_ended_when_the_command_exits() {
    let f = Fleet::with(|dir| {
        let leader = dir.join("escaped.pid");
        let child = dir.join("escaped-child.pid");
        format!(
            "[projects.escaper]\ncommand = {}\n",
            sh(&format!(
                "setsid sh -c 'echo $$ > {leader}; sleep 300 & echo $! > {child}; wait' & \
                 while [ ! -s {child} ]; do sleep 0.01; done; printf leaving",
                leader = shell_quote(&leader),
                child = shell_quote(&child),
            ))
        )
    });
    let d = f.start_daemon();
    let id = f.enqueue("escaper");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    let leader = read_pid(&f.file("escaped.pid"), &f);
    let child = read_pid(&f.file("escaped-child.pid"), &f);
    // Gone when the end was recorded; polled only to tolerate /proc's lag.
    wait_gone(&f, leader, "the process that left the command's session");
    wait_gone(&f, child, "its child");
    // The command's output, then the shim's note of what it ended (the sh and its sleep, both
    // gone on SIGTERM), on a line of its own although the output did not end one.
    assert_eq!(
        f.logs(id),
        "leaving\nfleet: ended 2 process(es) the command had started outside its process group \
         (setsid, a double fork), still running when it ended (SIGTERM)\n"
    );
    f.wait_until(DEADLINE, "the shim's warning in the daemon's log", || {
        d.stderr().contains("had left its process group")
    });
}

/// A helper script for the tests below: it says it is ready once its SIGTERM trap is set, then
/// waits; on SIGTERM it writes `cleaned` to the file given and exits, unless told to ignore
/// SIGTERM.
fn write_helper(dir: &std::path::Path) -> std::path::PathBuf {
    let helper = dir.join("helper.sh");
    std::fs::write(
        &helper,
        "case \"$3\" in\n\
         ignore) trap '' TERM ;;\n\
         *) trap 'echo cleaned > \"$2\"; exit 0' TERM ;;\n\
         esac\n\
         echo $$ > \"$1\"\n\
         while :; do sleep 0.05; done\n",
    )
    .unwrap();
    helper
}

/// What a command leaves running when it exits, in its process group (a background child) or
/// outside it (a helper it detached with `setsid`), gets SIGTERM first, as a cancelled command
/// does, and the run's end waits for it: both may clean up (a lock file, a temporary folder)
/// before they go.
#[test]
fn what_the_command_leaves_running_gets_sigterm_before_sigkill() {
    let f = Fleet::with(|dir| {
        let helper = shell_quote(&write_helper(dir));
        let q = |name: &str| shell_quote(&dir.join(name));
        format!(
            "[projects.leaver]\ncommand = {}\n",
            sh(&format!(
                "setsid sh {helper} {er} {ec} & sh {helper} {gr} {gc} & \
                 while [ ! -s {er} ] || [ ! -s {gr} ]; do sleep 0.01; done; echo leaving",
                er = q("escaped.ready"),
                ec = q("escaped.cleaned"),
                gr = q("group.ready"),
                gc = q("group.cleaned"),
            ))
        )
    });
    let _d = f.start_daemon();
    let id = f.enqueue("leaver");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    // Written by their SIGTERM traps before the run's end was recorded: no polling.
    for who in ["escaped", "group"] {
        assert_eq!(
            std::fs::read_to_string(f.file(&format!("{who}.cleaned")))
                .ok()
                .as_deref(),
            Some("cleaned\n"),
            "the {who} helper got no SIGTERM"
        );
    }
    // (The group's helper's shell may say "Terminated" of its `sleep`, which got the group's
    // SIGTERM too.)
    let log = f.logs(id);
    assert!(log.starts_with("leaving\n"), "{log:?}");
    assert!(
        log.ends_with(
            "\nfleet: ended 1 process(es) the command had started outside its process group \
             (setsid, a double fork), still running when it ended (SIGTERM)\n"
        ),
        "{log:?}"
    );
}

/// A helper that ignores SIGTERM gets SIGKILL once the project's `kill_grace` is over, and the
/// run's end is recorded once it is gone.
#[test]
fn a_leftover_that_ignores_sigterm_is_killed_after_the_kill_grace() {
    let f = Fleet::with(|dir| {
        let helper = shell_quote(&write_helper(dir));
        let ready = shell_quote(&dir.join("escaped.ready"));
        format!(
            "[projects.leaver]\ncommand = {}\nkill_grace = \"3s\"\n",
            sh(&format!(
                "setsid sh {helper} {ready} /dev/null ignore & \
                 while [ ! -s {ready} ]; do sleep 0.01; done; echo leaving",
            ))
        )
    });
    let _d = f.start_daemon();
    let id = f.enqueue("leaver");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    let helper = read_pid(&f.file("escaped.ready"), &f);
    wait_gone(&f, helper, "the helper that ignored SIGTERM");
    // The run's times are the command's own, not the helper's grace: the command ended as
    // soon as the helper was ready, well within the 3 s grace the helper held the end back.
    let at = |key: &str| {
        chrono::DateTime::parse_from_rfc3339(r[key].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{key}: {e}: {r}"))
    };
    let took = at("finished_at") - at("started_at");
    assert!(took < chrono::TimeDelta::milliseconds(2500), "{took}: {r}");
    // The helper, and the `sleep 0.05` it may have been waiting for when it was killed (handed
    // to the shim then, outside the command's group too).
    let log = f.logs(id);
    assert!(
        log == "leaving\nfleet: ended 1 process(es) the command had started outside its process \
                group (setsid, a double fork), still running when it ended (SIGTERM; SIGKILL for 1 \
                still running after the kill grace)\n"
            || log
                == "leaving\nfleet: ended 2 process(es) the command had started outside its \
                    process group (setsid, a double fork), still running when it ended (SIGTERM; \
                    SIGKILL for 2 still running after the kill grace)\n",
        "{log:?}"
    );
}

/// The same on `fleet cancel`: a process the command moved to a session of its own is gone by
/// the time the run is `cancelled`.
#[test]
fn a_cancel_ends_what_left_the_process_group_too() {
    let f = Fleet::with(|dir| {
        let escaped = dir.join("escaped.pid");
        format!(
            "[projects.escaper]\ncommand = {}\nkill_grace = \"1s\"\n",
            sh(&format!(
                "setsid sh -c 'echo $$ > {escaped}; exec sleep 300' & sleep 300",
                escaped = shell_quote(&escaped),
            ))
        )
    });
    let _d = f.start_daemon();
    let id = f.enqueue("escaper");
    let escaped = read_pid(&f.file("escaped.pid"), &f);
    f.wait_run(id, "running", |r| r["status"] == "running");
    f.cmd_ok(&["cancel", &id.to_string()]);
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "cancelled", "{r}");
    wait_gone(&f, escaped, "the process that left the command's session");
}

#[test]
fn cancel_running_and_queued_runs() {
    let f = Fleet::with(|dir| {
        let pidfile = dir.join("grandchild.pid");
        format!(
            "[projects.sleeper]\ncommand = {}\n",
            sh(&format!(
                "sleep 300 & echo $! > '{}'; sleep 300",
                pidfile.display()
            ))
        )
    });
    let _d = f.start_daemon();
    let first = f.enqueue("sleeper");
    let running = f.wait_run(first, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    let pid = running["pid"].as_i64().unwrap() as i32;
    let grandchild = read_pid(&f.file("grandchild.pid"), &f);

    // A second run of the same project waits behind the first (one active run per project).
    let second = f.enqueue("sleeper");
    assert_eq!(f.run(second)["status"], "queued");
    let out = f.cmd(&["cancel", &second.to_string()]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    // Queued: cancelled at once, no polling.
    let r = f.run(second);
    assert_eq!(status_of(&r), "cancelled", "{r}");
    assert!(
        r["started_at"].is_null(),
        "a cancelled queued run never started: {r}"
    );
    assert!(r["pid"].is_null(), "{r}");

    // Running: a request first, `cancelled` once the process is gone.
    let out = f.cmd(&["cancel", &first.to_string()]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let r = f.wait_terminal(first);
    assert_eq!(status_of(&r), "cancelled", "{r}");
    wait_gone(&f, pid, "the cancelled command");
    wait_gone(&f, grandchild, "the cancelled command's grandchild");
    assert!(
        group_members(pid).is_empty(),
        "process group {pid} still has members"
    );

    // Cancelling a run that already ended is refused (the action failed: exit 1).
    let out = f.cmd(&["cancel", &first.to_string()]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains(&first.to_string()), "{out:?}");

    // Nothing left of the cancelled runs blocks the project: a third run starts.
    let third = f.enqueue("sleeper");
    f.wait_status(third, "running");
}

/// A program that is not a shell (shells unblock signals at startup; `sleep` does not) must
/// still get the SIGTERM of a cancel or a timeout: with a kill grace of five minutes, only the
/// SIGTERM can end these runs within the deadline.
#[test]
fn cancel_and_timeout_reach_a_bare_program_with_sigterm() {
    let f = Fleet::new(
        "[projects.cancelme]\ncommand = [\"sleep\", \"300\"]\nkill_grace = \"5m\"\n\
         [projects.timeme]\ncommand = [\"sleep\", \"300\"]\ntimeout = \"1s\"\nkill_grace = \"5m\"\n",
    );
    let _d = f.start_daemon();
    let c = f.enqueue("cancelme");
    let t = f.enqueue("timeme");
    let running = f.wait_run(c, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    let pid = running["pid"].as_i64().unwrap() as i32;
    f.cmd_ok(&["cancel", &c.to_string()]);
    let r = f.wait_terminal(c);
    assert_eq!(status_of(&r), "cancelled", "{r}");
    assert_eq!(
        r["signal"],
        libc::SIGTERM,
        "ended by the SIGTERM, not a SIGKILL: {r}"
    );
    assert!(process_gone(pid), "the cancelled command is still alive");

    let r = f.wait_terminal(t);
    assert_eq!(status_of(&r), "timed_out", "{r}");
    assert_eq!(
        r["signal"],
        libc::SIGTERM,
        "ended by the SIGTERM, not a SIGKILL: {r}"
    );
    assert!(process_gone(r["pid"].as_i64().unwrap() as i32));
}
#[test]
fn retries_make_three_attempts_then_stop() {
    let f = Fleet::new(&format!(
        "[projects.flaky]\ncommand = {}\nretries = 2\nretry_backoff = \"100ms\"\n",
        sh("echo attempt $FLEET_ATTEMPT; exit 1")
    ));
    let _d = f.start_daemon();
    let first = f.enqueue("flaky");
    f.wait_until(DEADLINE, "three ended attempts", || {
        let runs = f.runs();
        runs.len() >= 3 && runs.iter().all(is_terminal)
    });
    let mut runs = f.runs();
    // The retry of a failed attempt is inserted in the same transaction that ends it, so a
    // fourth attempt would already be visible here.
    assert_eq!(runs.len(), 3, "{runs:#?}");
    runs.sort_by_key(|r| r["attempt"].as_i64());
    let attempts: Vec<i64> = runs
        .iter()
        .map(|r| r["attempt"].as_i64().unwrap())
        .collect();
    let triggers: Vec<&str> = runs
        .iter()
        .map(|r| r["trigger"].as_str().unwrap())
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert_eq!(triggers, ["manual", "retry", "retry"]);
    assert_eq!(runs[0]["id"].as_i64(), Some(first));
    for r in &runs {
        assert_eq!(status_of(r), "failed", "{r}");
        assert_eq!(r["exit_code"], 1, "{r}");
        assert_eq!(r["project"], "flaky");
        let id = r["id"].as_i64().unwrap();
        assert_eq!(f.logs(id), format!("attempt {}\n", r["attempt"]));
    }
}
