//! Another connection holding the database's write lock (`BEGIN IMMEDIATE`, for 8 s and for
//! 20 s, longer than the busy timeout) slows the daemon down but never makes it start a run
//! twice, exceed a cap, spin, or exit: a claim that fails on a busy database is logged and
//! retried on a later EVAL.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::*;

/// Six projects recording their runs, a global cap of 2; an external connection holds
/// `BEGIN IMMEDIATE` for `hold` once the first run is running. Returns the daemon's stderr.
fn busy_database(hold: Duration) -> String {
    const CAP: usize = 2;
    let f = Fleet::with(|dir| {
        let cmd = sh(&recorder_script(&dir.join("records"), "0.5"));
        let mut t = format!("max_concurrency = {CAP}\n");
        for i in 0..6 {
            t += &format!("[projects.p{i}]\ncommand = {cmd}\n");
        }
        t
    });
    let ids: Vec<i64> = (0..6).map(|i| f.enqueue(&format!("p{i}"))).collect();
    let mut d = f.start_daemon();
    f.wait_until(DEADLINE, "a first run to be running", || {
        f.runs().iter().any(|r| r["status"] == "running")
    });

    // The scenario: hold the write lock for a measured time (not a synchronisation sleep).
    let mut conn = rusqlite::Connection::open(f.state_dir().join("fleet.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(60)).unwrap();
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("BEGIN IMMEDIATE");
    let held_at = Instant::now();
    let mut blocked_exit = false;
    while held_at.elapsed() < hold {
        d.assert_alive();
        // Runs that ended while the lock is held cannot be finalized: their shim's exit record
        // is there, the database still says active. Proof the hold really blocks the daemon.
        if !blocked_exit {
            blocked_exit = f.runs().iter().any(|r| {
                matches!(status_of(r), "starting" | "running")
                    && has_record(&f, r["id"].as_i64().unwrap(), "exit")
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stderr_during_hold = d.stderr();
    tx.rollback().expect("ROLLBACK");
    drop(conn);
    eprintln!("held the write lock for {:?}", held_at.elapsed());
    assert!(
        blocked_exit,
        "no ended run waited for the lock: the hold did not block the daemon\n{}",
        f.diagnostics()
    );

    f.wait_until(Duration::from_secs(120), "all six runs to end", || {
        let runs = f.runs();
        runs.len() == 6 && runs.iter().all(is_terminal)
    });
    d.assert_alive();
    let runs = f.runs();
    assert_eq!(runs.len(), 6, "{runs:#?}");
    for r in &runs {
        assert_eq!(status_of(r), "succeeded", "{r}");
        assert_eq!(r["exit_code"], 0, "{r}");
        assert_eq!(r["attempt"], 1, "{r}");
    }

    let records = read_records(&f.file("records"));
    // `max_overlap` panics if any run id started (or ended) twice.
    let overlap = max_overlap(&records);
    let started: Vec<i64> = records
        .iter()
        .filter(|r| r.start)
        .map(|r| r.run_id)
        .collect();
    assert_eq!(
        started.len(),
        6,
        "each run started exactly once: {records:#?}"
    );
    assert_eq!(
        started.iter().copied().collect::<BTreeSet<_>>(),
        ids.iter().copied().collect::<BTreeSet<_>>()
    );
    assert_eq!(records.len(), 12, "{records:#?}");
    if let Err(e) = overlap.check(CAP, &[]) {
        panic!("{e}");
    }
    eprintln!("observed max overlap {overlap:?}");
    assert_check_ok(&f);
    d.assert_alive();
    stderr_during_hold
}

#[test]
fn failure2_busy_database_8s() {
    busy_database(Duration::from_secs(8));
}

#[test]
fn failure2_busy_database_20s() {
    let stderr = busy_database(Duration::from_secs(20));
    const WARNING: &str = "EVAL could not finish; retrying later";
    let n = stderr.lines().filter(|l| l.contains(WARNING)).count();
    eprintln!("{n} EVAL retry warnings during the hold");
    assert!(
        n >= 1,
        "a 20 s hold (longer than the busy timeout) must be logged as a failed EVAL retried \
         later; daemon stderr during the hold:\n{stderr}"
    );
    // Retried on a backoff, never in a spin: each attempt waits out the busy timeout or a
    // doubling backoff, so a 20 s hold leaves a handful of warnings, not hundreds.
    assert!(n < 40, "{n} failed EVALs in 20 s: a spin?\n{stderr}");
}
