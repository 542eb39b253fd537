//! Caps hold under load, every run succeeds with its own output in its log, and the overlap
//! sweep used to check caps catches a violation.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::*;

const CAP_A: usize = 2;
const CAP_B: usize = 3;
const CAP_GLOBAL: usize = 4;

#[test]
fn twenty_runs_over_two_namespaces_respect_every_cap() {
    let f = Fleet::with(|dir| {
        let rec = dir.join("records");
        let cmd = sh(&recorder_script(&rec, "0.5"));
        let mut t = format!(
            "max_concurrency = {CAP_GLOBAL}\n\
             [namespaces.a]\nmax_concurrency = {CAP_A}\n\
             [namespaces.b]\nmax_concurrency = {CAP_B}\n"
        );
        for i in 0..4 {
            t += &format!("[projects.a{i}]\nnamespace = \"a\"\ncommand = {cmd}\n");
        }
        for i in 0..5 {
            t += &format!("[projects.b{i}]\nnamespace = \"b\"\ncommand = {cmd}\n");
        }
        t
    });
    // 6 runs in a, 14 in b: while both have work, the global cap binds (2 + 2); once a drains,
    // b's own cap of 3 binds. The database allows one active run per project, hence 4 and 5
    // projects.
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(f.enqueue(&format!("a{}", i % 4)));
    }
    for i in 0..14 {
        ids.push(f.enqueue(&format!("b{}", i % 5)));
    }
    let started = Instant::now();
    let _d = f.start_daemon();
    f.wait_until(Duration::from_secs(90), "all 20 runs to end", || {
        let runs = f.runs();
        runs.len() == 20 && runs.iter().all(is_terminal)
    });
    let elapsed = started.elapsed();

    let runs = f.runs();
    assert_eq!(runs.len(), 20);
    for r in &runs {
        assert_eq!(status_of(r), "succeeded", "{r}");
        assert_eq!(r["exit_code"], 0, "{r}");
        assert_eq!(r["attempt"], 1, "{r}");
        assert_eq!(r["trigger"], "manual", "{r}");
        assert!(
            r["started_at"].is_string() && r["finished_at"].is_string(),
            "{r}"
        );
    }
    for id in &ids {
        let log = f.logs(*id);
        assert!(
            log.lines().any(|l| l == format!("hello run {id}")),
            "log of run {id} lacks its own greeting: {log:?}"
        );
        // No other run's output leaked in.
        assert_eq!(
            log.lines().filter(|l| l.starts_with("hello run")).count(),
            1,
            "{log:?}"
        );
    }

    let records = read_records(&f.file("records"));
    assert_eq!(records.len(), 40, "one start and one end per run");
    let recorded: BTreeSet<i64> = records.iter().map(|r| r.run_id).collect();
    assert_eq!(recorded, ids.iter().copied().collect::<BTreeSet<_>>());
    let overlap = max_overlap(&records);
    eprintln!("observed max overlap {overlap:?} in {elapsed:?}");
    check_caps(&overlap, CAP_GLOBAL, CAP_A, CAP_B);
    // The caps must actually bind, or this test could not catch a violation.
    assert_eq!(overlap.per_namespace["a"], CAP_A, "{overlap:?}");
    assert_eq!(overlap.per_namespace["b"], CAP_B, "{overlap:?}");
    assert_eq!(overlap.global, CAP_GLOBAL, "{overlap:?}");
}

fn check_caps(o: &Overlap, global: usize, a: usize, b: usize) {
    if let Err(e) = o.check(global, &[("a", a), ("b", b)]) {
        panic!("{e}");
    }
}

/// The sweep itself can fail: synthetic records with a violation are caught, touching
/// intervals are not counted as overlapping.
#[test]
fn overlap_sweep_catches_violations() {
    let rec = |start: bool, ns: &str, p: &str, id: i64, at: u128| Record {
        start,
        namespace: ns.into(),
        project: p.into(),
        run_id: id,
        at,
    };
    // a0 [0,10], a1 [5,15], a2 [10,20] (touching a0: not overlapping), b0 [1,30].
    let records = vec![
        rec(true, "a", "a0", 1, 0),
        rec(true, "b", "b0", 4, 1),
        rec(true, "a", "a1", 2, 5),
        rec(false, "a", "a0", 1, 10),
        rec(true, "a", "a2", 3, 10),
        rec(false, "a", "a1", 2, 15),
        rec(false, "a", "a2", 3, 20),
        rec(false, "b", "b0", 4, 30),
    ];
    let o = max_overlap(&records);
    assert_eq!(o.per_namespace["a"], 2);
    assert_eq!(o.per_namespace["b"], 1);
    assert_eq!(o.global, 3);
    assert_eq!(o.check(3, &[("a", 2), ("b", 1)]), Ok(()));
    assert!(
        o.check(2, &[("a", 2), ("b", 1)]).is_err(),
        "a global violation must be caught"
    );
    assert!(
        o.check(3, &[("a", 1), ("b", 1)]).is_err(),
        "a namespace violation must be caught"
    );
    // Two runs of one project at once, and a run started twice, are caught too.
    let mut twice = records.clone();
    twice.push(rec(true, "a", "a0", 9, 2));
    twice.push(rec(false, "a", "a0", 9, 3));
    assert!(max_overlap(&twice).check(9, &[("a", 9), ("b", 9)]).is_err());
    let mut double = records;
    double.push(rec(true, "a", "a0", 1, 40));
    assert!(try_max_overlap(&double).is_err());
}
