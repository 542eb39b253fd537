//! The scenario every failpoint test shares, what it reads back (statuses, run files, shims,
//! the database), and [`finish`]: a clean daemon, then every check of the outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::binary::require_failpoints;
use super::crashy::{poll, Crashy};
use super::{CAP, PROJECTS, RETRY_BACKOFF};
use crate::common::*;

/// What the clean daemon must end with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Every run succeeded in attempt 1, no retry: claims that never started were requeued
    /// (same attempt), runs in flight were adopted or finalized from their exit record.
    FirstAttempt,
    /// At least one run is `lost` (its shim died between `started` and `exit`), and each lost
    /// run's retry (attempt 2) succeeded; the others succeeded in attempt 1. `command_ran`:
    /// whether the lost attempt's command ran (once) before the shim died.
    LostThenRetried { command_ran: bool },
}

/// The scenario every failpoint test starts from (see the crate doc).
pub struct Scenario {
    /// The fleet, with one run of each project enqueued.
    pub f: Fleet,
    /// The record file the commands write their starts and ends to.
    pub rec: PathBuf,
    /// The hand-enqueued runs, one per project.
    pub ids: Vec<i64>,
}

/// A fresh [`Scenario`]: the fleet written and its runs enqueued, no daemon yet.
pub fn scenario() -> Scenario {
    require_failpoints();
    let f = Fleet::with(|dir| {
        let rec = dir.join("records");
        let cmd = sh(&recorder_script(&rec, "0.3"));
        let mut t = format!("max_concurrency = {CAP}\n");
        for i in 0..PROJECTS {
            t += &format!(
                "[projects.p{i}]\ncommand = {cmd}\nretries = 1\nretry_backoff = \"{RETRY_BACKOFF}\"\n"
            );
        }
        t
    });
    let rec = f.file("records");
    std::fs::write(&rec, "").unwrap();
    let ids = (0..PROJECTS).map(|i| f.enqueue(&format!("p{i}"))).collect();
    Scenario { f, rec, ids }
}

/// Runs that recovery sent back to the queue as never started (events `starting` → `queued`).
pub fn requeued(f: &Fleet) -> BTreeSet<i64> {
    requeues(f).into_iter().collect()
}

/// Runs (of `ids`) whose records hold `name`: a `started`, `running` or `exit` record, or for
/// `tombstones`, a tombstone.
pub fn with_file(f: &Fleet, ids: &[i64], name: &str) -> BTreeSet<i64> {
    ids.iter()
        .copied()
        .filter(|&id| match name {
            "tombstones" => has_tombstone(f, id),
            _ => has_record(f, id, name),
        })
        .collect()
}

/// run id → status, as `fleet runs --json` shows them.
pub fn statuses(f: &Fleet) -> BTreeMap<i64, String> {
    f.runs()
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Runs (of `ids`) in `status`.
pub fn in_status(f: &Fleet, ids: &[i64], status: &str) -> BTreeSet<i64> {
    let s = statuses(f);
    ids.iter()
        .copied()
        .filter(|id| s.get(id).map(String::as_str) == Some(status))
        .collect()
}

/// Live shims of this test: pid → run id.
pub fn shims(f: &Fleet) -> BTreeMap<i32, i64> {
    marked_pids(&f.marker)
        .into_iter()
        .filter_map(|pid| Some((pid, shim_run_id(pid)?)))
        .collect()
}

/// `fleet check --json`, whatever its exit code.
pub fn fleet_check_json(f: &Fleet) -> Value {
    let out = f.cmd(&["check", "--json"]);
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("`fleet check --json` is not JSON ({e}): {out:?}"))
}

/// Starts a clean daemon (no FAILPOINTS), waits until every run has ended and every shim is
/// gone, and checks the outcome against `expect`.
pub fn finish(s: &Scenario, what: &str, expect: Expect, crashies: &[&Crashy<'_>]) {
    let f = &s.f;
    wait_daemon_lock_released(&f.state_dir());
    let d = f.start_daemon();
    poll(
        f,
        crashies,
        DEADLINE + Duration::from_secs(10),
        "every run to end after the clean restart",
        || {
            let runs = f.runs();
            runs.iter().all(is_terminal)
        },
    );
    // Late shims of the crashed daemon (sleeping, or found tombstoned) must be gone too before
    // the records are read.
    poll(f, crashies, DEADLINE, "every shim to be gone", || {
        shims(f).is_empty()
    });
    let runs = f.runs();
    let logs: Vec<String> = crashies.iter().map(|c| c.describe()).collect();
    let ctx = format!(
        "[{what}]\nruns: {runs:#?}\n{}\n--- clean daemon ---\n{}",
        logs.join("\n"),
        d_stderr(f)
    );
    drop(d);

    let check = f.cmd(&["check"]);
    assert_eq!(
        check.code(),
        Some(0),
        "{ctx}\nfleet check found violations:\n{}{}",
        check.stdout,
        check.stderr
    );
    assert!(runs.iter().all(is_terminal), "{ctx}");

    // The commands' own records: no run id started twice, cap held, one run per project.
    let records = read_records(&s.rec);
    let overlap = try_max_overlap(&records).unwrap_or_else(|e| panic!("{ctx}\n{e}"));
    overlap
        .check(CAP, &[])
        .unwrap_or_else(|e| panic!("{ctx}\n{e}"));
    let count = |id: i64, start: bool| {
        records
            .iter()
            .filter(|r| r.run_id == id && r.start == start)
            .count()
    };
    let one_start_one_end = |id: i64| (count(id, true), count(id, false)) == (1, 1);

    let by_id: BTreeMap<i64, &Value> = runs
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), r))
        .collect();
    let first_attempt_ok = |id: i64| {
        let r = by_id[&id];
        r["status"] == "succeeded"
            && r["attempt"] == 1
            && r["trigger"] == "manual"
            && r["exit_code"] == 0
            && one_start_one_end(id)
    };
    match expect {
        Expect::FirstAttempt => {
            assert_eq!(runs.len(), s.ids.len(), "{ctx}\nno retry may exist");
            for &id in &s.ids {
                assert!(
                    first_attempt_ok(id),
                    "{ctx}\nrun {id} must have succeeded in attempt 1, started and ended once \
                     (records: {} start, {} end)",
                    count(id, true),
                    count(id, false)
                );
            }
        }
        Expect::LostThenRetried { command_ran } => {
            let retries = retry_of(f);
            let lost: Vec<i64> = s
                .ids
                .iter()
                .copied()
                .filter(|id| by_id[id]["status"] == "lost")
                .collect();
            assert!(!lost.is_empty(), "{ctx}\nat least one attempt must be lost");
            assert_eq!(
                runs.len(),
                s.ids.len() + lost.len(),
                "{ctx}\none retry per lost run"
            );
            for &id in &s.ids {
                if lost.contains(&id) {
                    let expected = if command_ran { (1, 1) } else { (0, 0) };
                    assert_eq!(
                        (count(id, true), count(id, false)),
                        expected,
                        "{ctx}\nlost run {id}: its command should have {} (start, end records)",
                        if command_ran {
                            "run exactly once"
                        } else {
                            "never run"
                        }
                    );
                    let kids: Vec<i64> = retries
                        .iter()
                        .filter(|(_, p)| **p == id)
                        .map(|(c, _)| *c)
                        .collect();
                    assert_eq!(kids.len(), 1, "{ctx}\nlost run {id} must have one retry");
                    let k = by_id[&kids[0]];
                    assert!(
                        k["status"] == "succeeded"
                            && k["attempt"] == 2
                            && k["trigger"] == "retry"
                            && one_start_one_end(kids[0]),
                        "{ctx}\nthe retry {} of lost run {id} must have succeeded (attempt 2) once",
                        kids[0]
                    );
                } else {
                    assert!(
                        first_attempt_ok(id),
                        "{ctx}\nrun {id} was not lost, so it must have succeeded in attempt 1"
                    );
                }
            }
        }
    }
}

/// The clean daemons' logs, for failure messages.
pub fn d_stderr(f: &Fleet) -> String {
    // The harness names the clean daemons' logs daemon-<n>.stderr.
    (0..4)
        .filter_map(|n| std::fs::read_to_string(f.file(&format!("daemon-{n}.stderr"))).ok())
        .collect::<Vec<_>>()
        .join("\n")
}
