//! A drain on PostgreSQL keeps every cap and starts each run once, across a SIGKILL of the
//! daemon; a run in flight across the restart is adopted with its real exit code.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{assert_no_sqlite, database_url, pg_fleet};
use crate::common::restart::*;
use crate::common::*;

const CAP_A: usize = 3;
const CAP_B: usize = 5;
const CAP_GLOBAL: usize = 6;
const RUNS: usize = 60;

#[test]
fn sixty_runs_over_two_namespaces_survive_a_sigkill_mid_drain() {
    let Some(url) = database_url() else { return };
    let f = pg_fleet(&url, |dir| {
        let cmd = sh(&recorder_script(&dir.join("records"), "0.3"));
        let mut t = format!(
            "max_concurrency = {CAP_GLOBAL}\n\
             [namespaces.a]\nmax_concurrency = {CAP_A}\n\
             [namespaces.b]\nmax_concurrency = {CAP_B}\n"
        );
        // One active run per project: more projects than each namespace's cap.
        for i in 0..4 {
            t += &format!("[projects.a{i}]\nnamespace = \"a\"\ncommand = {cmd}\n");
        }
        for i in 0..6 {
            t += &format!("[projects.b{i}]\nnamespace = \"b\"\ncommand = {cmd}\n");
        }
        t
    });
    let mut ids = Vec::new();
    for i in 0..RUNS {
        let project = if i % 3 == 0 {
            format!("a{}", i % 4)
        } else {
            format!("b{}", i % 6)
        };
        ids.push(f.enqueue(&project));
    }
    let mut d1 = f.start_daemon();
    // Mid-drain: some runs done, some in flight.
    f.wait_until(DEADLINE, "a third of the runs to end", || {
        f.runs().iter().filter(|r| is_terminal(r)).count() >= RUNS / 3
    });
    d1.kill();
    let in_flight: Vec<i64> = f
        .runs()
        .iter()
        .filter(|r| status_of(r) == "running")
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    eprintln!("SIGKILL with {} runs in flight", in_flight.len());

    let _d2 = f.start_daemon();
    f.wait_until(Duration::from_secs(120), "all runs to end", || {
        let runs = f.runs();
        runs.len() == RUNS && runs.iter().all(is_terminal)
    });
    for r in f.runs() {
        assert_eq!(status_of(&r), "succeeded", "{r}");
        assert_eq!(r["exit_code"], 0, "{r}");
        assert_eq!(r["attempt"], 1, "started once, never retried: {r}");
    }
    let records = read_records(&f.file("records"));
    assert_eq!(records.len(), 2 * RUNS, "one start and one end per run");
    let recorded: BTreeSet<i64> = records.iter().map(|r| r.run_id).collect();
    assert_eq!(recorded, ids.iter().copied().collect::<BTreeSet<_>>());
    let overlap = max_overlap(&records);
    eprintln!("observed max overlap {overlap:?}");
    if let Err(e) = overlap.check(CAP_GLOBAL, &[("a", CAP_A), ("b", CAP_B)]) {
        panic!("{e}");
    }
    // The caps bound, or this test could not see them exceeded.
    assert_eq!(overlap.global, CAP_GLOBAL, "{overlap:?}");
    assert_check_ok(&f);
    assert_no_sqlite(&f);
}

#[test]
fn a_run_in_flight_across_a_sigkill_is_adopted_with_its_real_exit_code() {
    let Some(url) = database_url() else { return };
    let f = pg_fleet(&url, |dir| {
        format!(
            "max_concurrency = 1\n[projects.held]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                3
            )
        )
    });
    let mut d1 = f.start_daemon();
    let epoch1 = wait_epoch(&f, d1.pid(), 0);
    let held = f.enqueue("held");
    let before = f.wait_run(held, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    f.wait_until(DEADLINE, "the start line of the held run", || {
        !lines(&f.file("held.start")).is_empty()
    });
    d1.kill();

    let d2 = f.start_daemon();
    wait_epoch(&f, d2.pid(), epoch1);
    let r = f.run(held);
    assert_eq!(status_of(&r), "running", "still running, adopted: {r}");
    assert_eq!(r["pid"], before["pid"], "the same command process: {r}");

    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "failed", "{r}");
    assert_eq!(r["exit_code"], 3, "the real exit code: {r}");
    assert_eq!(r["attempt"], 1, "{r}");
    assert_eq!(
        lines(&f.file("held.start")),
        [format!("start {held}")],
        "started again after the restart"
    );
    assert_check_ok(&f);
    assert_no_sqlite(&f);
}
