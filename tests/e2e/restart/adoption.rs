//! Double spawn after restart must be impossible: every packer (the namespaced one and the
//! fallback used with zero namespaces) counts the runs the database records as active, whether
//! the restarted daemon adopted them or not, so a run in flight across a SIGKILL is never
//! started again and no cap is exceeded.
//!
//! The two SIGKILL tests see the run adopted, which puts it in the slot pool: they would pass
//! even if the packers were handed the pool alone. What catches that is a run the pool cannot
//! hold: `failure1_db_active_run_unknown_to_the_pool_still_counts` here, and the tests of
//! `db_only` (with namespaces, and a real claim recovery could not settle).

use crate::common::restart::*;
use crate::common::*;

#[test]
fn failure1_zero_namespaces_sigkill_restart_adopts_run() {
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 1\n\
             [projects.held]\ncommand = {}\n\
             [projects.other]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                3
            ),
            quick_command(&dir.join("other.start")),
        )
    });
    let start_file = f.file("held.start");

    let mut d1 = f.start_daemon();
    let epoch1 = wait_epoch(&f, d1.pid(), 0);
    let held = f.enqueue("held");
    let before = f.wait_run(held, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    f.wait_until(DEADLINE, "the start line of the held run", || {
        !lines(&start_file).is_empty()
    });
    d1.kill();

    let d2 = f.start_daemon();
    let epoch2 = wait_epoch(&f, d2.pid(), epoch1);
    eprintln!("epochs {epoch1} then {epoch2}");

    // A run of another project, queued while the adopted run holds the only slot of the global
    // cap: the fallback packer must count the adopted run and leave it queued.
    let other = f.enqueue("other");
    assert_stays_queued(&f, other, "global cap 1 is taken by the adopted run");

    let r = f.run(held);
    assert_eq!(
        status_of(&r),
        "running",
        "the adopted run is still running: {r}"
    );
    assert_eq!(
        r["pid"], before["pid"],
        "same command process (adopted): {r}"
    );
    assert_eq!(r["attempt"], 1, "{r}");
    assert_eq!(
        lines(&start_file),
        [format!("start {held}")],
        "started again after restart"
    );
    assert!(
        !f.file("other.start").exists(),
        "other ran while the cap was taken"
    );
    let s = f.status();
    assert_eq!(s["global"]["active"], 1, "{s}");

    // Let the adopted run end: its real exit code, recorded by its shim.
    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "failed", "{r}");
    assert_eq!(r["exit_code"], 3, "the real exit code: {r}");
    assert_eq!(r["attempt"], 1, "{r}");

    // The slot is free: the queued run starts now, and only after the adopted one ended.
    let r = f.wait_terminal(other);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    let held_end = lines(&f.file("held.end"));
    let other_start = lines(&f.file("other.start"));
    assert_eq!(held_end.len(), 1, "{held_end:?}");
    assert_eq!(other_start.len(), 1, "{other_start:?}");
    assert!(
        stamp(&other_start[0]) >= stamp(&held_end[0]),
        "other started before the adopted run ended: {other_start:?} {held_end:?}"
    );
    assert_eq!(lines(&start_file), [format!("start {held}")]);
    assert_eq!(f.runs().len(), 2, "no retry or extra run: {:#?}", f.runs());
    assert_check_ok(&f);
}

#[test]
fn failure1_with_namespaces_sigkill_restart_adopts_run() {
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 4\n\
             [namespaces.ops]\nmax_concurrency = 1\n\
             [projects.held]\nnamespace = \"ops\"\ncommand = {}\n\
             [projects.sibling]\nnamespace = \"ops\"\ncommand = {}\n\
             [projects.free]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                3
            ),
            quick_command(&dir.join("sibling.start")),
            quick_command(&dir.join("free.start")),
        )
    });
    let start_file = f.file("held.start");

    let mut d1 = f.start_daemon();
    let epoch1 = wait_epoch(&f, d1.pid(), 0);
    let held = f.enqueue("held");
    let before = f.wait_run(held, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    f.wait_until(DEADLINE, "the start line of the held run", || {
        !lines(&start_file).is_empty()
    });
    d1.kill();

    let d2 = f.start_daemon();
    let epoch2 = wait_epoch(&f, d2.pid(), epoch1);
    eprintln!("epochs {epoch1} then {epoch2}");

    // The sibling is queued first; a run outside the namespace then goes through — proof that
    // the EVALs that saw the sibling queued did happen.
    let sibling = f.enqueue("sibling");
    let free = f.enqueue("free");
    let r = f.wait_terminal(free);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_stays_queued(
        &f,
        sibling,
        "namespace ops (cap 1) is taken by the adopted run",
    );

    let r = f.run(held);
    assert_eq!(
        status_of(&r),
        "running",
        "the adopted run is still running: {r}"
    );
    assert_eq!(
        r["pid"], before["pid"],
        "same command process (adopted): {r}"
    );
    assert_eq!(
        lines(&start_file),
        [format!("start {held}")],
        "started again after restart"
    );
    assert!(
        !f.file("sibling.start").exists(),
        "the sibling ran over the namespace cap"
    );
    let s = f.status();
    assert_eq!(s["namespaces"]["ops"]["active"], 1, "{s}");

    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "failed", "{r}");
    assert_eq!(r["exit_code"], 3, "the real exit code: {r}");

    let r = f.wait_terminal(sibling);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    let held_end = lines(&f.file("held.end"));
    let sibling_start = lines(&f.file("sibling.start"));
    assert_eq!(held_end.len(), 1, "{held_end:?}");
    assert_eq!(sibling_start.len(), 1, "{sibling_start:?}");
    assert!(
        stamp(&sibling_start[0]) >= stamp(&held_end[0]),
        "the sibling started before the adopted run ended: {sibling_start:?} {held_end:?}"
    );
    assert_eq!(lines(&start_file), [format!("start {held}")]);
    assert_eq!(f.runs().len(), 3, "no retry or extra run: {:#?}", f.runs());
    assert_check_ok(&f);
}

/// Double spawn after restart, at the daemon's level: the database records a run as active that the
/// slot pool cannot hold (recovery cannot read its run files, so it is neither adopted nor
/// settled). The packers must still count it — they see merge(pool, DB), not the pool — so under
/// a global cap of 1 nothing else starts. Goes red if the daemon hands the packers its pool alone.
#[test]
fn failure1_db_active_run_unknown_to_the_pool_still_counts() {
    let f = Fleet::new(
        "max_concurrency = 1\n\
         [projects.held]\ncommand = [\"true\"]\n\
         [projects.other]\ncommand = [\"true\"]\n",
    );
    let held = f.enqueue("held");
    {
        // Another writer (as a restored backup or a crashed daemon of another build might leave
        // it): run `held` is active, and its records cannot be read (a folder stands where its
        // overflow file goes).
        let db = rusqlite::Connection::open(f.state_dir().join("fleet.db")).unwrap();
        db.execute(
            "UPDATE runs SET status = 'running', claim_token = 7, started_at = 1 WHERE id = ?1",
            [held],
        )
        .unwrap();
        let runs = f.state_dir().join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        std::fs::create_dir_all(runs.join(format!("{held}.more"))).unwrap();
    }
    let _d = f.start_daemon();
    let other = f.enqueue("other");
    assert_stays_queued(
        &f,
        other,
        "the global cap of 1 is taken by a run only the database knows",
    );
    assert_eq!(status_of(&f.run(held)), "running");
}

/// A run whose row another program ended while its command ran is not in the database's
/// running set, so only the slot pool counts its seat: a daemon restarted after a SIGKILL
/// finds its live shim in the run files and holds the seat until the command ends, leaving
/// the row as the other program wrote it.
#[test]
fn a_run_ended_by_another_writer_keeps_its_seat_across_a_restart() {
    let f = held_and_other();
    let mut d1 = f.start_daemon();
    let epoch1 = wait_epoch(&f, d1.pid(), 0);
    let held = f.enqueue("held");
    f.wait_until(DEADLINE, "the start line of the held run", || {
        !lines(&f.file("held.start")).is_empty()
    });
    d1.kill();
    outside_writer(&f)
        .execute(
            "UPDATE runs SET status = 'failed', finished_at = started_at WHERE id = ?1",
            [held],
        )
        .unwrap();

    let d2 = f.start_daemon();
    wait_epoch(&f, d2.pid(), epoch1);
    let other = f.enqueue("other");
    assert_stays_queued(
        &f,
        other,
        "global cap 1 is taken by the command still running",
    );
    assert!(
        !f.file("other.start").exists(),
        "other ran while the held run's command held the only seat"
    );

    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(other);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert!(
        f.file("held.end").exists(),
        "other started before the held run's command ended\n{}",
        f.diagnostics()
    );
    // The row stays as the other program wrote it.
    assert_eq!(status_of(&f.run(held)), "failed");
}
