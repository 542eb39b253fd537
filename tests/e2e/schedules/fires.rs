//! A schedule fires exactly one run per occurrence: trigger `schedule`, its own occurrence,
//! never before it, never for the past; the command sees its occurrence.

use std::collections::{BTreeMap, BTreeSet};

use super::arming::*;
use super::notes::*;
use super::runs::*;
use crate::common::time::*;
use crate::common::*;

/// A per-second schedule fires every second, each run with trigger `schedule` and its own
/// occurrence, never before the occurrence, never for the past; the command sees its occurrence
/// in FLEET_OCCURRENCE. The tick is 30 s, so the firing is the daemon's wake-up timer's doing.
#[test]
fn fires_on_schedule_exactly_one_run_per_occurrence() {
    let f = Fleet::with(|dir| {
        let rec = dir.join("rec");
        format!(
            "{HEADER}tick = \"30s\"\n\
             [projects.tick]\n\
             command = {}\n\
             schedule = \"*/1 * * * * *\"\n",
            sh(&format!(
                "echo occurrence=$FLEET_OCCURRENCE; {}",
                note("start", &rec)
            ))
        )
    });
    let rec = f.file("rec");
    let t0 = now_ms();
    let d = f.start_daemon();
    f.wait_until(DEADLINE, "5 scheduled runs to succeed", || {
        runs_of(&f, "tick")
            .iter()
            .filter(|r| s(r, "status") == "succeeded")
            .count()
            >= 5
    });
    let runs = runs_of(&f, "tick");
    let all = show(&runs);

    // Nothing fires for the past: a new schedule starts at the daemon's first EVAL.
    let first = occ(&runs[0]).unwrap();
    assert!(
        first > t0 / 1000 * 1000,
        "fired an occurrence before the daemon started:\n{all}"
    );

    let mut seen = BTreeSet::new();
    let mut prev: Option<i64> = None;
    let mut gaps = Vec::new();
    for r in &runs {
        assert_eq!(s(r, "trigger"), "schedule", "{all}");
        assert_eq!(r["attempt"], 1, "{all}");
        let o = occ(r).unwrap_or_else(|| panic!("scheduled run without occurrence: {r}"));
        assert_eq!(o % 1000, 0, "occurrence not a whole second: {r}");
        assert!(
            seen.insert(o),
            "two runs for occurrence {}:\n{all}",
            rfc3339(o)
        );
        // Never early.
        assert!(
            t(r, "enqueued_at").unwrap() >= o,
            "enqueued before its occurrence: {r}"
        );
        if let Some(st) = t(r, "started_at") {
            assert!(st >= o, "started before its occurrence: {r}");
        }
        // Newer runs are for later occurrences; a gap (a late EVAL on a loaded machine) is only
        // ever a skip the daemon logged.
        if let Some(p) = prev {
            assert!(o > p, "occurrences out of order:\n{all}");
            if o - p != 1000 {
                gaps.push((p, o));
            }
        }
        prev = Some(o);
    }

    assert!(
        gaps.is_empty() || d.stderr().contains("missed occurrences skipped"),
        "occurrences skipped in {gaps:?} and the daemon did not say so:\n{all}\n{}",
        d.stderr()
    );

    // What the command saw.
    for r in runs.iter().filter(|r| s(r, "status") == "succeeded") {
        let log = f.logs(id(r));
        assert_eq!(
            log.trim(),
            format!("occurrence={}", s(r, "occurrence")),
            "run {}: FLEET_OCCURRENCE differs from the run's occurrence",
            id(r)
        );
    }
    let notes = starts(&rec);
    let mut by_run: BTreeMap<i64, usize> = BTreeMap::new();
    for n in &notes {
        *by_run.entry(n.run).or_default() += 1;
        let r = runs.iter().find(|r| id(r) == n.run);
        if let Some(r) = r {
            assert_eq!(
                n.occurrence.as_deref(),
                Some(s(r, "occurrence")),
                "{n:?} vs {r}"
            );
            assert!(
                n.ms() >= occ(r).unwrap(),
                "command started before its occurrence: {n:?}"
            );
        }
    }
    assert!(
        by_run.values().all(|&c| c == 1),
        "a run started twice: {notes:?}"
    );
    let occs: BTreeSet<&str> = notes
        .iter()
        .filter_map(|n| n.occurrence.as_deref())
        .collect();
    assert_eq!(
        occs.len(),
        notes.len(),
        "two starts for one occurrence: {notes:?}"
    );
    assert_check_ok(&f);
}

/// Another program puts a trigger on the database that refuses every run of one scheduled
/// project: that project's schedule step fails, and it alone. The other schedule keeps firing,
/// an on-demand run still starts, and the daemon's log names the project that fails.
#[test]
fn one_project_refused_by_the_database_stops_only_its_own_schedule() {
    let f = Fleet::new(&format!(
        "{HEADER}tick = \"30s\"\n\
         [projects.bad]\ncommand = [\"true\"]\nschedule = \"*/1 * * * * *\"\n\
         [projects.good]\ncommand = [\"true\"]\nschedule = \"*/1 * * * * *\"\n\
         [projects.manual]\ncommand = [\"true\"]\n"
    ));
    // Creates the database, then the other program's trigger.
    let first = f.enqueue("manual");
    f.db()
        .execute_batch(
            "CREATE TRIGGER refuse_bad BEFORE INSERT ON runs WHEN NEW.project = 'bad' \
             BEGIN SELECT RAISE(ABORT, 'refused by another program'); END",
        )
        .unwrap();
    let d = f.start_daemon();
    f.wait_until(DEADLINE, "3 runs of the other schedule to succeed", || {
        runs_of(&f, "good")
            .iter()
            .filter(|r| s(r, "status") == "succeeded")
            .count()
            >= 3
    });
    assert_eq!(f.wait_terminal(first)["status"], "succeeded");
    let second = f.enqueue("manual");
    assert_eq!(f.wait_terminal(second)["status"], "succeeded");
    assert!(runs_of(&f, "bad").is_empty());
    let log = d.stderr();
    assert!(
        log.lines().any(|l| l.contains("project=bad")
            && l.contains("refused by another program")
            && l.contains("the schedule step failed")),
        "{log}"
    );
    // `fleet status` tells it too, once the occurrence has waited past two minutes: here its
    // time is moved ten minutes back rather than waited for (the daemon leaves the row of a
    // failing schedule as it was).
    f.db()
        .execute_batch("UPDATE schedules SET next_fire = next_fire - 600000 WHERE project = 'bad'")
        .unwrap();
    let overdue = |st: &serde_json::Value, project: &str| {
        st["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["project"] == project)
            .map(|s| s["overdue"].clone())
    };
    let st = f.status();
    assert_eq!(
        overdue(&st, "bad"),
        Some(serde_json::Value::Bool(true)),
        "{st}"
    );
    assert_eq!(
        overdue(&st, "good"),
        Some(serde_json::Value::Bool(false)),
        "{st}"
    );
    let text = f.cmd_ok(&["status"]);
    assert!(
        text.contains("schedule bad: overdue") && !text.contains("schedule good: overdue"),
        "{text}"
    );
    // A project whose schedule was taken out of the config leaves its row, which is not overdue.
    let toml = std::fs::read_to_string(f.file("fleet.toml")).unwrap();
    let unscheduled = toml.replacen(
        "[projects.bad]\ncommand = [\"true\"]\nschedule = \"*/1 * * * * *\"\n",
        "[projects.bad]\ncommand = [\"true\"]\n",
        1,
    );
    assert_ne!(unscheduled, toml);
    std::fs::write(f.file("fleet.toml"), unscheduled).unwrap();
    assert_eq!(
        overdue(&f.status(), "bad"),
        Some(serde_json::Value::Bool(false))
    );
}
