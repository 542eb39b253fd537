//! A running run's segment (the file of its records) removed under it (by hand: the operator's
//! mistake), then restarts:
//! its records are gone, so it looks never started, but the database saw it running. While its
//! command's process group is still there it stays active, holding its seat; once the command
//! is gone it ends `lost` (not retried), and the rest of the fleet goes on — it must never stop
//! every EVAL, nor be requeued and run twice.

use crate::common::restart::*;
use crate::common::*;

#[test]
fn a_running_run_whose_files_were_removed_ends_lost_and_blocks_nothing() {
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 1\n\
             [projects.held]\ncommand = {}\nretries = 2\n\
             [projects.other]\ncommand = [\"true\"]\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                0
            )
        )
    });
    let mut d1 = f.start_daemon();
    let held = f.enqueue("held");
    f.wait_run(held, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    d1.kill();
    std::fs::remove_file(lock_path(&f, held)).unwrap();
    // While its command still runs, the run stays active, holding the global cap of 1: the
    // other project's run waits (proof that EVALs ran: the daemon answers and claims nothing).
    let mut d2 = f.start_daemon();
    let waiting = f.enqueue("other");
    assert_stays_queued(&f, waiting, "the run without files still holds the cap");
    assert_eq!(status_of(&f.run(held)), "running", "{}", f.diagnostics());
    d2.kill();
    std::fs::write(f.file("GO"), "").unwrap();
    f.wait_until(DEADLINE, "the shim and the command to exit", || {
        others(&f, &[]).is_empty()
    });

    let _d2 = f.start_daemon();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "lost", "{r}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap_or("")
            .contains("recorded running"),
        "{r}"
    );
    // The global cap of 1 was held by it: freed, the other project's runs go through.
    assert_eq!(status_of(&f.wait_terminal(waiting)), "succeeded");
    let other = f.enqueue("other");
    assert_eq!(status_of(&f.wait_terminal(other)), "succeeded");
    assert_eq!(
        lines(&f.file("held.start")),
        [format!("start {held}")],
        "started once, and never retried"
    );
    let runs = f.runs();
    assert_eq!(
        runs.iter().filter(|r| r["project"] == "held").count(),
        1,
        "no retry: {runs:#?}"
    );
}

/// A run whose overflow file became a folder while its shim ran: when the shim ends, the reap
/// cannot read it, and looks again at every EVAL. It says so at the first failure and
/// then at doubling intervals — not at every EVAL (every tick) for as long as it lasts — and
/// once the path is a file again the run is settled and that is said too.
#[test]
fn an_unreadable_run_file_is_logged_at_doubling_intervals() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.held]\ncommand = {}\n[projects.other]\ncommand = [\"true\"]\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                0
            )
        )
    });
    let d = f.start_daemon();
    let held = f.enqueue("held");
    f.wait_run(held, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    // Its records are in its slot; an overflow that cannot be read may hold newer ones.
    let lock = f.state_dir().join(format!("runs/{held}.more"));
    std::fs::create_dir(&lock).unwrap();
    std::fs::write(f.file("GO"), "").unwrap();
    f.wait_until(DEADLINE, "the shim and the command to exit", || {
        others(&f, &[d.pid()]).is_empty()
    });
    let complaints = || {
        d.stderr()
            .matches("cannot read or lock the run's files")
            .count()
    };
    f.wait_until(DEADLINE, "the reap to fail", || complaints() > 0);
    // Twenty EVALs at least, each of which looks at the run again.
    eval_barrier(&f, 20);
    let n = complaints();
    assert!(
        (1..=6).contains(&n),
        "{n} complaints in 20 EVALs: one, then at the 2nd, 4th, 8th, 16th failure\n{}",
        d.stderr()
    );
    assert_eq!(
        status_of(&f.run(held)),
        "running",
        "left active while unreadable"
    );

    std::fs::remove_dir(&lock).unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(
        (status_of(&r), r["exit_code"].as_i64()),
        ("succeeded", Some(0)),
        "its exit record, in its slot, counts once the files can be read: {r}"
    );
    f.wait_until(DEADLINE, "the recovery to be said", || {
        d.stderr().contains("the run's files can be read again")
    });
    assert_check_ok(&f);
}
