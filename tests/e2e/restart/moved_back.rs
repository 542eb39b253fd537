//! Another writer moves a run back to `queued` while its claim's command runs (`UPDATE runs SET
//! status = 'queued'`: a script, a hand-edit, a restored copy of the database). The daemon
//! must go on for every other run, keep counting the command against every cap while it runs,
//! and never start it a second time: the run's next claim finds the first claim's `started`
//! record, and its `exit` record once the command has ended, and ends the run as the command
//! did.

use crate::common::restart::*;
use crate::common::*;

/// Moves run `id` back to `queued`, as another program's write would.
fn move_back_to_queued(f: &Fleet, id: i64) {
    let db = outside_writer(f);
    let changed = db
        .execute("UPDATE runs SET status = 'queued' WHERE id = ?1", [id])
        .unwrap();
    assert_eq!(changed, 1);
}

/// What must hold once `held`'s command, moved back to `queued` while it ran, has ended: the
/// other run went through (no EVAL stopped), `held` started once and ended as its command did
/// (`succeeded`, exit 0, from the first claim's records) with a note that says why, and `fleet
/// check` finds nothing wrong (the files name one start).
fn assert_settled(f: &Fleet, held: i64, other: i64) {
    let r = f.wait_terminal(other);
    assert_eq!(status_of(&r), "succeeded", "{r}\n{}", f.diagnostics());
    let r = f.wait_terminal(held);
    assert_eq!(
        (status_of(&r), r["exit_code"].as_i64()),
        ("succeeded", Some(0)),
        "{r}\n{}",
        f.diagnostics()
    );
    assert!(
        r["reason"]
            .as_str()
            .unwrap_or("")
            .contains("not started again"),
        "{r}"
    );
    assert_eq!(
        lines(&f.file("held.start")).len(),
        1,
        "the command of run {held} started more than once\n{}",
        f.diagnostics()
    );
    // Claimed twice with no requeue between, but its files name one claim that started.
    assert_check_ok(f);
}

/// Moved back after its start was written: the end its shim reports cannot be written from
/// `queued`. Red without the skip (every EVAL after the end fails, `other` never starts) and
/// without the cap still counting the command (`other` starts beside it).
#[test]
fn failure3_a_running_run_moved_back_to_queued_starts_once_and_stops_nothing() {
    let f = held_and_other();
    let held = f.enqueue("held");
    let _d = f.start_daemon();
    f.wait_status(held, "running");
    move_back_to_queued(&f, held);
    let other = f.enqueue("other");
    assert_stays_queued(
        &f,
        other,
        "the cap (1) is taken by held's command, still running",
    );
    assert!(lines(&f.file("other.start")).is_empty());
    std::fs::write(f.file("GO"), "").unwrap();
    assert_settled(&f, held, other);
}

/// Moved back before its start was reported (the shim held after its `started` record), and
/// paused, so that the run is not claimed again while its command runs: the start report is
/// skipped too, and the command must still count against the cap — in the EVAL that skips
/// the report (`other` is queued by then) and in every EVAL after it, until the shim is gone.
/// Red if the skipped start drops the run from that EVAL's running set, or its slot from the
/// pool (`other` starts beside the command).
#[test]
fn failure3_a_starting_run_moved_back_to_queued_still_counts_and_starts_once() {
    let f = held_and_other();
    let _d = f.start_daemon_env(&[("FAILPOINTS", "shim-after-started=sleep(2000)")]);
    let held = f.enqueue("held");
    f.wait_status(held, "starting");
    move_back_to_queued(&f, held);
    f.cmd_ok(&["pause", "held"]);
    let other = f.enqueue("other");
    f.wait_until(DEADLINE, "held's command to start", || {
        !lines(&f.file("held.start")).is_empty()
    });
    assert_stays_queued(
        &f,
        other,
        "the cap (1) is taken by held's command, whose start report was skipped",
    );
    assert!(lines(&f.file("other.start")).is_empty());
    std::fs::write(f.file("GO"), "").unwrap();
    f.wait_until(DEADLINE, "held's command to end", || {
        !lines(&f.file("held.end")).is_empty()
    });
    f.cmd_ok(&["resume", "held"]);
    assert_settled(&f, held, other);
}

/// A project with two seats (`max_parallel = 2`), both taken, a third run queued with a higher
/// priority: one running run moved back to `queued` must keep its seat while its command runs. Red if
/// the running set counts the database's rows of a project in place of the pool's (the third
/// run starts beside the two commands).
#[test]
fn failure3_a_run_moved_back_keeps_its_seat_of_a_project_with_two() {
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 4\ntick = \"200ms\"\n\
             [projects.wide]\nmax_parallel = 2\ncommand = {}\n",
            gated_command(
                &dir.join("wide.start"),
                &dir.join("GO"),
                &dir.join("wide.end"),
                0
            ),
        )
    });
    let first = f.enqueue("wide");
    let second = f.enqueue("wide");
    let _d = f.start_daemon();
    f.wait_status(first, "running");
    f.wait_status(second, "running");
    // Ahead of the moved-back run in the queue: the packing asks for it first.
    let third: i64 = f
        .cmd_ok(&["enqueue", "--priority", "5", "wide"])
        .trim()
        .parse()
        .unwrap();
    move_back_to_queued(&f, first);
    assert_stays_queued(
        &f,
        third,
        "both seats of wide are taken by commands still running",
    );
    assert_eq!(lines(&f.file("wide.start")).len(), 2);
    std::fs::write(f.file("GO"), "").unwrap();
    assert_eq!(status_of(&f.wait_terminal(second)), "succeeded");
    assert_eq!(status_of(&f.wait_terminal(third)), "succeeded");
    assert_eq!(status_of(&f.wait_terminal(first)), "succeeded");
    assert_eq!(
        lines(&f.file("wide.start")).len(),
        3,
        "each run's command once\n{}",
        f.diagnostics()
    );
    assert_check_ok(&f);
}

/// A running run's row deleted by another program: its end cannot be written, and must stop
/// nothing else; its command keeps its seat while it runs. Red without the skip of a
/// transition for a missing row (every EVAL after the end fails: `other` never starts).
#[test]
fn failure3_a_running_run_deleted_under_its_claim_stops_nothing() {
    let f = held_and_other();
    let held = f.enqueue("held");
    let _d = f.start_daemon();
    f.wait_status(held, "running");
    let db = outside_writer(&f);
    db.execute("DELETE FROM events WHERE run_id = ?1", [held])
        .unwrap();
    assert_eq!(
        db.execute("DELETE FROM runs WHERE id = ?1", [held])
            .unwrap(),
        1
    );
    let other = f.enqueue("other");
    assert_stays_queued(
        &f,
        other,
        "the cap (1) is taken by held's command, still running",
    );
    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(other);
    assert_eq!(status_of(&r), "succeeded", "{r}\n{}", f.diagnostics());
    assert_eq!(lines(&f.file("held.start")).len(), 1);
    // What is left is the files of a run the database no longer has: said, never acted on.
    let report = check_report(&f);
    assert_eq!(violation_kinds(&report), ["folder_without_run"], "{report}");
}
