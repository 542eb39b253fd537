//! A shim killed (SIGKILL: the OOM killer, an operator's mistake) while its command has a child
//! in its process group: the parent-death signal ends the command, not the child. The run must
//! never end — above all not be retried beside what still runs of it — while that child lives.
//! The daemon (running, or at its next start) kills what is left of the group, identified by
//! its number and its session (the shim's), then ends the run `lost` and retries it. While no
//! daemon runs, `fleet check` lists the run as orphaned, not as a violation.

use std::path::Path;

use supervisor::shim::runfiles::RunFiles;

use crate::common::*;
use crate::helpers::*;

/// The first attempt appends `start <run id>` to `starts`, leaves a `sleep` in its process
/// group (its pid in `child`) and waits for it; a retry appends its line, and `child alive` if
/// that `sleep` still runs (a zombie does not: where nothing reaps orphans, a killed child
/// stays one), and exits 0.
fn orphaning_command(dir: &Path) -> String {
    sh(&format!(
        "echo start $FLEET_RUN_ID >> {starts}; \
         if [ \"$FLEET_ATTEMPT\" = 1 ]; then sleep 300 & echo $! > {child}; wait; \
         else c=/proc/$(cat {child}); \
         if [ -e $c ] && ! grep -q 'State:[[:space:]]*Z' $c/status; then \
         echo child alive >> {starts}; fi; fi",
        starts = shell_quote(&dir.join("starts")),
        child = shell_quote(&dir.join("child")),
    ))
}

fn fleet() -> Fleet {
    Fleet::with(|dir| {
        format!(
            "max_concurrency = 1\n\
             [projects.held]\ncommand = {}\nretries = 1\nretry_backoff = \"0s\"\n\
             [projects.other]\ncommand = [\"true\"]\n",
            orphaning_command(dir)
        )
    })
}

/// A running run's processes: its shim, its command and the command's child.
struct Procs {
    shim: i32,
    command: i32,
    child: i32,
}

/// Waits until run `held` runs and its command's child has started; returns their pids.
fn running(f: &Fleet, held: i64) -> Procs {
    let r = f.wait_run(held, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    let child_file = f.file("child");
    f.wait_until(DEADLINE, "the command's child to start", || {
        std::fs::read_to_string(&child_file).is_ok_and(|s| s.ends_with('\n'))
    });
    let started = RunFiles::new(&f.state_dir(), held)
        .read_started()
        .unwrap()
        .expect("the started record");
    Procs {
        shim: started.shim_pid,
        command: r["pid"].as_i64().unwrap() as i32,
        child: std::fs::read_to_string(&child_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
    }
}

/// SIGKILLs the shim and waits until it and the command are gone (the parent-death signal).
/// The child is left: with no daemon running, it is still there afterwards (a running daemon
/// may already have ended it).
fn kill_shim(f: &Fleet, p: &Procs) {
    send_signal(p.shim, Signal::KILL).unwrap();
    f.wait_until(DEADLINE, "the shim and its command to die", || {
        process_gone(p.shim) && process_gone(p.command)
    });
}

/// The run ends `lost` and is retried; the retry starts only once the child is gone, and the
/// run that waited for the cap runs too.
fn assert_lost_then_retried(f: &Fleet, held: i64, waiting: i64, child: i32) {
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "lost", "{r}");
    assert!(process_gone(child), "the run ended while its child ran");
    assert_eq!(status_of(&f.wait_terminal(waiting)), "succeeded");
    let runs = f.runs();
    let retry = runs
        .iter()
        .find(|r| r["retry_of"] == held)
        .unwrap_or_else(|| panic!("no retry of {held}: {runs:#?}"))["id"]
        .as_i64()
        .unwrap();
    assert_eq!(status_of(&f.wait_terminal(retry)), "succeeded");
    assert_eq!(
        lines(&f.file("starts")),
        [format!("start {held}"), format!("start {retry}")],
        "the retry ran once, and not beside the child"
    );
    assert_check_ok(f);
}

#[test]
fn a_shim_killed_under_a_live_daemon_takes_its_commands_group_with_its_run() {
    let f = fleet();
    let d = f.start_daemon();
    let held = f.enqueue("held");
    let p = running(&f, held);
    let waiting = f.enqueue("other");
    kill_shim(&f, &p);
    assert_lost_then_retried(&f, held, waiting, p.child);
    assert!(
        d.stderr().contains("killed them (SIGKILL)"),
        "{}",
        d.stderr()
    );
}

/// Starts run `held` under a daemon, then SIGKILLs the daemon and the run's shim: the child is
/// left, with no daemon. Returns the run and its processes.
fn orphaned_while_down(f: &Fleet) -> (i64, Procs) {
    let mut d1 = f.start_daemon();
    let held = f.enqueue("held");
    let p = running(f, held);
    d1.kill();
    kill_shim(f, &p);
    assert!(!process_gone(p.child), "the child outlives its shim");
    (held, p)
}

#[test]
fn recovery_kills_what_is_left_of_a_run_whose_shim_died() {
    let f = fleet();
    let (held, p) = orphaned_while_down(&f);
    let out = f.cmd(&["check", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["orphaned"][0]["run_id"], held, "{report}");
    assert_eq!(report["orphaned"][0]["pgid"], p.command, "{report}");
    let _d2 = f.start_daemon();
    let waiting = f.enqueue("other");
    assert_lost_then_retried(&f, held, waiting, p.child);
}
