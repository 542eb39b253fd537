//! A shim killed (SIGKILL: the OOM killer, an operator's mistake) while its command has a child
//! in its process group: the parent-death signal ends the command, not the child. The run must
//! never end — above all not be retried beside what still runs of it — while that child lives.
//! The daemon (running, or at its next start) kills what is left of the group, identified by
//! its number and its session (the shim's), then ends the run `lost` and retries it. While no
//! daemon runs, `fleet check` lists the run as orphaned, not as a violation.
//!
//! When the run's files were removed or overwritten by hand before the shim died, they no
//! longer name the group: the number the database recorded for the command does. The run is
//! then held — its seat kept, nothing retried or started beside the child — but the group is
//! not signalled (a number alone may have been reused), until the operator ends it.

use std::path::Path;

use runrecord::RunFiles;

use crate::common::restart::*;
use crate::common::*;

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
    assert_retried_once_alone(f, held);
    assert_check_ok(f);
}

/// Run `held` was retried once, the retry succeeded, and it did not run beside the first
/// attempt's child (its command would have said `child alive`).
fn assert_retried_once_alone(f: &Fleet, held: i64) {
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

/// The daemon's warning for a run held by its recorded group number alone.
const UNIDENTIFIED: &str = "do not name its command's process group";

/// Run `held`'s command's group, known by number only, keeps the run active and the cap of 1
/// taken, and nothing signals the child. Then the operator ends the group, and the run ends
/// `lost`.
fn assert_held_until_the_group_is_ended(f: &Fleet, held: i64, waiting: i64, p: &Procs) {
    assert_stays_queued(
        f,
        waiting,
        "the run whose group lives on still holds the cap",
    );
    assert_eq!(status_of(&f.run(held)), "running", "{}", f.diagnostics());
    assert!(
        !process_gone(p.child),
        "a group known by number only was signalled"
    );
    signal_group(p.command, Signal::KILL).unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "lost", "{r}");
    assert_eq!(status_of(&f.wait_terminal(waiting)), "succeeded");
}

/// Every file of run `id`'s own in `runs/` (its log, …; its records are in its slot).
fn run_files(f: &Fleet, id: i64) -> Vec<std::path::PathBuf> {
    let prefix = format!("{id}.");
    std::fs::read_dir(f.state_dir().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect()
}

#[test]
fn a_shim_killed_after_its_files_were_removed_keeps_its_run_while_the_group_lives() {
    let f = fleet();
    let d = f.start_daemon();
    let held = f.enqueue("held");
    let p = running(&f, held);
    // Its records (in its slot) and any file of its own (its log).
    assert!(slot_used(&f, held));
    overwrite_slot(&f, held, b"");
    for file in run_files(&f, held) {
        std::fs::remove_file(file).unwrap();
    }
    let waiting = f.enqueue("other");
    kill_shim(&f, &p);
    f.wait_until(DEADLINE, "the daemon to say why it holds the run", || {
        d.stderr().contains(UNIDENTIFIED)
    });
    // Not a violation: the run's command is still there, by the number the database recorded.
    let report = check_report(&f);
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["orphaned"][0]["run_id"], held, "{report}");
    assert_eq!(report["orphaned"][0]["pgid"], p.command, "{report}");
    assert_held_until_the_group_is_ended(&f, held, waiting, &p);
    assert_eq!(lines(&f.file("starts")), [format!("start {held}")]);
    assert_check_ok(&f);
}

#[test]
fn recovery_holds_a_run_whose_file_was_overwritten_while_its_group_lives() {
    let f = fleet();
    let mut d1 = f.start_daemon();
    let held = f.enqueue("held");
    let p = running(&f, held);
    d1.kill();
    overwrite_slot(&f, held, b"garbage\n");
    kill_shim(&f, &p);
    // The file is what is wrong, and `fleet check` says so — not that the run lost its shim.
    let report = check_report(&f);
    assert_eq!(violation_kinds(&report), ["unreadable_file"], "{report}");
    let d2 = f.start_daemon();
    let waiting = f.enqueue("other");
    f.wait_until(DEADLINE, "the daemon to say why it holds the run", || {
        d2.stderr().contains(UNIDENTIFIED)
    });
    assert_held_until_the_group_is_ended(&f, held, waiting, &p);
    // Its end is unknown (the records are unreadable): lost, and retried — only now that
    // nothing of the first attempt runs.
    assert_retried_once_alone(&f, held);
    // Still one finding: the file the operator overwrote.
    assert_eq!(check_report(&f)["violations"].as_array().unwrap().len(), 1);
}
