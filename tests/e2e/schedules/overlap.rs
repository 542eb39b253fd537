//! The overlap policies: `forbid` (the default) skips an occurrence while a run is active,
//! `queue` runs occurrences one after another, `replace` cancels the active run and starts the
//! new one.

use std::collections::BTreeSet;

use serde_json::Value;

use super::arming::*;
use super::notes::*;
use super::runs::*;
use crate::common::time::*;
use crate::common::*;

/// `forbid` (the default, left unset here): a per-second schedule with a 2.5 s command never has
/// two runs active — from the commands' own start/end records — and never queues one behind
/// another; the occurrences that fall while one is active are cancelled runs saying "forbid",
/// each naming a run that was indeed active or queued then.
#[test]
fn forbid_never_has_two_active_and_records_the_skips() {
    let f = Fleet::with(|dir| {
        format!(
            "{HEADER}[projects.job]\ncommand = {}\nschedule = \"*/1 * * * * *\"\n",
            sh(&recorder_script(&dir.join("rec"), "2.5"))
        )
    });
    let rec = f.file("rec");
    let mut d = f.start_daemon();
    f.wait_until(
        DEADLINE,
        "2 runs to succeed and 3 occurrences to be skipped",
        || {
            let runs = runs_of(&f, "job");
            let succeeded = runs
                .iter()
                .filter(|r| s(r, "status") == "succeeded")
                .count();
            // (4 succeeded and still no 3 skips: forbid does not skip; the checks below say how.)
            (succeeded >= 2 && runs.iter().filter(|r| is_skip(r)).count() >= 3) || succeeded >= 4
        },
    );
    d.kill();
    let runs = runs_of(&f, "job");
    let all = show(&runs);

    let records = read_records(&rec);
    let overlap = max_overlap(&records);
    assert_eq!(
        overlap.per_project.get("job"),
        Some(&1),
        "{overlap:?}\n{all}"
    );

    let started: BTreeSet<i64> = records.iter().map(|r| r.run_id).collect();
    let mut occurrences = BTreeSet::new();
    for r in &runs {
        assert_eq!(s(r, "trigger"), "schedule", "{all}");
        assert!(
            occurrences.insert(occ(r).unwrap()),
            "two runs for one occurrence:\n{all}"
        );
        if is_skip(r) {
            let reason = s(r, "reason");
            assert!(reason.contains("forbid"), "{r}");
            assert!(
                r["started_at"].is_null() && !started.contains(&id(r)),
                "a skip ran: {r}"
            );
            // The run the reason names is the last one that ran before the occurrence was
            // skipped. (Not judged by its `finished_at`: that is when its command ended, which
            // comes before its shim has written the end and let go, the moment the daemon
            // sees the run end — on a busy machine, after the next occurrence.)
            let blocker: i64 = reason
                .split("run ")
                .nth(1)
                .and_then(|x| x.split_whitespace().next())
                .and_then(|x| x.parse().ok())
                .unwrap_or_else(|| panic!("the skip names no run: {r}"));
            let at = t(r, "enqueued_at").unwrap();
            let last = runs
                .iter()
                .filter(|o| !is_skip(o) && id(o) != id(r) && t(o, "enqueued_at").unwrap() <= at)
                .max_by_key(|o| t(o, "enqueued_at").unwrap())
                .map(id);
            assert_eq!(
                last,
                Some(blocker),
                "skip {} names run {blocker}, not the last to run before {}:\n{all}",
                id(r),
                rfc3339(at)
            );
        } else {
            // Never queued behind another run: nothing else was active or queued when it fired.
            let at = t(r, "enqueued_at").unwrap();
            let others = holders_at(&runs, at, id(r));
            assert!(
                others.is_empty(),
                "run {} fired while {others:?} active or queued (forbid must skip):\n{all}",
                id(r)
            );
        }
    }
    assert!(
        runs.iter().any(is_skip),
        "no occurrence was skipped:\n{all}"
    );
    // Every per-second occurrence from the first to the last is handled (fired or skipped), or,
    // after a late EVAL on a loaded machine, logged as missed.
    let v: Vec<&Value> = runs.iter().collect();
    for w in v.windows(2) {
        let (a, b) = (occ(w[0]).unwrap(), occ(w[1]).unwrap());
        assert!(
            b - a == 1000 || d.stderr().contains("missed occurrences skipped"),
            "occurrences between {} and {} vanished:\n{all}",
            rfc3339(a),
            rfc3339(b)
        );
    }
}

/// `queue`: a per-second schedule with a 1.5 s command: occurrences wait behind the active run
/// and start one after another, in order, each after the previous one ended; none is skipped.
#[test]
fn queue_runs_occurrences_one_after_another() {
    let f = Fleet::with(|dir| {
        format!(
            "{HEADER}[projects.job]\ncommand = {}\nschedule = \"*/1 * * * * *\"\noverlap = \"queue\"\n",
            sh(&recorder_script(&dir.join("rec"), "1.5"))
        )
    });
    let rec = f.file("rec");
    let mut d = f.start_daemon();
    f.wait_until(DEADLINE, "3 queued-up runs to succeed", || {
        runs_of(&f, "job")
            .iter()
            .filter(|r| s(r, "status") == "succeeded")
            .count()
            >= 3
    });
    d.kill();
    let runs = runs_of(&f, "job");
    let all = show(&runs);
    let records = read_records(&rec);
    let overlap = max_overlap(&records);
    assert_eq!(
        overlap.per_project.get("job"),
        Some(&1),
        "{overlap:?}\n{all}"
    );

    assert!(
        runs.iter().all(|r| !is_skip(r)),
        "queue skipped an occurrence:\n{all}"
    );
    let occs: BTreeSet<i64> = runs.iter().map(|r| occ(r).unwrap()).collect();
    assert_eq!(
        occs.len(),
        runs.len(),
        "two runs for one occurrence:\n{all}"
    );

    let mut started: Vec<&Value> = runs
        .iter()
        .filter(|r| t(r, "started_at").is_some())
        .collect();
    started.sort_by_key(|r| t(r, "started_at"));
    let mut waited = 0;
    for w in started.windows(2) {
        let (prev, next) = (w[0], w[1]);
        let prev_end = t(prev, "finished_at").unwrap_or_else(|| {
            panic!("run {} started while {} active:\n{all}", id(next), id(prev))
        });
        assert!(t(next, "started_at").unwrap() >= prev_end, "{all}");
        assert!(
            occ(next) > occ(prev),
            "queued occurrences started out of order:\n{all}"
        );
        if t(next, "enqueued_at").unwrap() < prev_end {
            waited += 1;
        }
    }
    assert!(
        waited >= 2,
        "occurrences did not wait behind the active run:\n{all}"
    );
}

/// `replace`: every 2 s, a command that would sleep 30 s: each occurrence cancels the active run
/// (SIGTERM: it ends `cancelled`, its process gone) and the new run starts after it ended.
#[test]
fn replace_cancels_the_active_run_and_starts_the_new_one() {
    let f = Fleet::with(|dir| {
        format!(
            "{HEADER}[projects.job]\ncommand = {}\nschedule = \"*/2 * * * * *\"\noverlap = \"replace\"\n",
            sh(&format!("{}; exec sleep 30", note("start", &dir.join("rec"))))
        )
    });
    let rec = f.file("rec");
    let mut d = f.start_daemon();
    f.wait_until(DEADLINE, "3 runs started, the first two ended", || {
        let runs = runs_of(&f, "job");
        let done = runs.len() >= 3 && starts(&rec).len() >= 3 && runs[..2].iter().all(is_terminal);
        // (The first run still active 10 s after the next occurrence: not replaced; the checks
        // below say how.)
        let stuck =
            runs.len() >= 2 && !is_terminal(&runs[0]) && now_ms() > occ(&runs[1]).unwrap() + 10_000;
        done || stuck
    });
    d.kill();
    let runs = runs_of(&f, "job");
    let all = show(&runs);
    let notes = starts(&rec);
    for w in runs.windows(2).take(2) {
        let (old, new) = (&w[0], &w[1]);
        assert_eq!(s(old, "status"), "cancelled", "replaced run: {all}");
        assert!(
            !is_skip(old),
            "the replaced run was not skipped, it ran: {all}"
        );
        assert_eq!(s(new, "trigger"), "schedule");
        let (old_end, new_occ) = (t(old, "finished_at").unwrap(), occ(new).unwrap());
        assert!(new_occ > occ(old).unwrap(), "{all}");
        assert!(
            old_end >= new_occ,
            "run {} ended before the next occurrence replaced it:\n{all}",
            id(old)
        );
        assert!(
            old_end - new_occ < 20_000,
            "run {} was not stopped when replaced:\n{all}",
            id(old)
        );
        let new_start = notes
            .iter()
            .find(|n| n.run == id(new))
            .unwrap_or_else(|| panic!("run {} never started: {notes:?}", id(new)));
        assert!(
            new_start.ms() >= old_end,
            "run {} started before run {} ended:\n{all}\n{notes:?}",
            id(new),
            id(old)
        );
        if let Some(pid) = old["pid"].as_i64() {
            assert!(
                process_gone(pid as i32),
                "the replaced run's process lives on: {old}"
            );
        }
    }
    let ids: BTreeSet<i64> = notes.iter().map(|n| n.run).collect();
    assert_eq!(ids.len(), notes.len(), "a run started twice: {notes:?}");
}
