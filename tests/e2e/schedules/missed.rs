//! Occurrences missed while the daemon was down: the latest runs once if it is within
//! `starting_deadline`, else it is recorded as skipped; the older ones are skipped, and said so
//! in the daemon's log and in `fleet runs`.

use serde_json::Value;

use super::arming::*;
use super::notes::*;
use super::runs::*;
use crate::common::time::*;
use crate::common::*;

/// Down across three occurrences and back within `starting_deadline`: the latest one runs, once;
/// the two older ones are skipped, said so on the run that fired (while it runs, and after it
/// ended: `fleet runs` is where the operator looks, later) and in the daemon's log.
#[test]
fn killed_across_occurrences_back_within_deadline_runs_latest_once() {
    let f = Fleet::new("");
    let (rec, go) = (f.file("rec"), f.file("go"));
    let cmd = sh(&format!(
        "echo occurrence=$FLEET_OCCURRENCE; {}; while [ ! -e {} ]; do sleep 0.05; done",
        note("start", &rec),
        shell_quote(&go)
    ));
    let (mut d, o) = arm(&f, &[], "job", &[0, 1, 2], |o| {
        format!(
            "{HEADER}{PROBE}[projects.job]\ncommand = {cmd}\nschedule = \"{}\"\nstarting_deadline = \"30s\"\n",
            seconds_expr(o)
        )
    });
    d.kill();
    assert!(
        runs_of(&f, "job").is_empty(),
        "fired before the kill: {}",
        f.diagnostics()
    );

    // Stay down until all three passed; the latest is then ~1.2 s late, well within 30 s.
    wait_clock(o[2] + 1200);
    let d2 = f.start_daemon();
    f.wait_until(DEADLINE, "the catch-up run to be running", || {
        runs_of(&f, "job")
            .iter()
            .any(|r| s(r, "status") == "running")
            && !starts(&rec).is_empty()
    });
    let runs = runs_of(&f, "job");
    assert_eq!(
        runs.len(),
        1,
        "one run for three missed occurrences:\n{}",
        show(&runs)
    );
    let r = &runs[0];
    assert_eq!(s(r, "trigger"), "schedule", "{r}");
    assert_eq!(occ(r), Some(o[2]), "the latest missed occurrence runs: {r}");
    let names_skips = |r: &Value| {
        let reason = s(r, "reason");
        reason.contains("2 earlier occurrence(s) missed and skipped")
            && reason.contains(&rfc3339(o[0]))
            && reason.contains(&rfc3339(o[1]))
    };
    assert!(
        names_skips(r),
        "the skipped occurrences are not named on the run that fired: {r}"
    );
    let err = d2.stderr();
    assert!(
        err.contains("WARN") && err.contains("missed occurrences skipped"),
        "the daemon did not warn about the skipped occurrences:\n{err}"
    );

    std::fs::write(&go, "").unwrap();
    let r = f.wait_status(id(r), "succeeded");
    assert_eq!(
        f.logs(id(&r)).trim(),
        format!("occurrence={}", rfc3339(o[2]))
    );

    // Once: another crash and restart fire nothing more for these occurrences.
    drop(d2);
    let _d3 = f.start_daemon();
    eval_happened(&f);
    let runs = runs_of(&f, "job");
    assert_eq!(
        runs.len(),
        1,
        "fired again after a restart:\n{}",
        show(&runs)
    );
    assert_eq!(starts(&rec).len(), 1, "{:?}", read_notes(&rec));
    assert_check_ok(&f);

    // Still visible once the run has ended.
    let table = f.cmd_ok(&["runs", "--project", "job"]);
    assert!(
        table.contains(&format!("occurrence {}", rfc3339(o[2]))),
        "{table}"
    );
    assert!(
        names_skips(&runs[0]) && table.contains("missed and skipped"),
        "the note of the skipped occurrences {} and {} was on run {} while it ran, and is gone \
         now that it ended (reason {:?}):\n{table}",
        rfc3339(o[0]),
        rfc3339(o[1]),
        id(&runs[0]),
        runs[0]["reason"]
    );
}

/// Down across occurrences and back after `starting_deadline`: nothing runs; the latest missed
/// occurrence is recorded as a cancelled (skipped) run saying why, and the daemon warns.
#[test]
fn killed_across_occurrences_back_after_deadline_skips_and_says_so() {
    let f = Fleet::new("");
    let rec = f.file("rec");
    let cmd = sh(&note("start", &rec));
    let (mut d, o) = arm(&f, &[], "job", &[0, 1], |o| {
        format!(
            "{HEADER}{PROBE}[projects.job]\ncommand = {cmd}\nschedule = \"{}\"\nstarting_deadline = \"2s\"\n",
            seconds_expr(o)
        )
    });
    d.kill();
    assert!(
        runs_of(&f, "job").is_empty(),
        "fired before the kill: {}",
        f.diagnostics()
    );

    // The latest occurrence is > 3.5 s late at restart: beyond the 2 s deadline. The next one
    // is a minute away.
    wait_clock(o[1] + 3500);
    let d2 = f.start_daemon();
    f.wait_until(
        DEADLINE,
        "the skip of the late occurrence to be recorded",
        || !runs_of(&f, "job").is_empty(),
    );
    eval_happened(&f);
    let runs = runs_of(&f, "job");
    assert_eq!(runs.len(), 1, "{}", show(&runs));
    let r = &runs[0];
    assert_eq!(
        s(r, "status"),
        "cancelled",
        "a too-late occurrence must not run: {r}"
    );
    assert_eq!(s(r, "trigger"), "schedule", "{r}");
    assert_eq!(occ(r), Some(o[1]), "{r}");
    assert!(r["started_at"].is_null() && r["pid"].is_null(), "{r}");
    let reason = s(r, "reason");
    assert!(
        reason.starts_with("skipped:") && reason.contains("starting_deadline"),
        "the skip does not say why: {r}"
    );
    assert!(
        reason.contains("1 earlier occurrence(s) missed and skipped")
            && reason.contains(&rfc3339(o[0])),
        "the older skipped occurrence is not named: {r}"
    );
    assert!(
        starts(&rec).is_empty(),
        "the command ran: {:?}",
        read_notes(&rec)
    );
    let err = d2.stderr();
    assert!(
        err.contains("WARN") && err.contains("starting_deadline"),
        "the daemon did not warn about the late occurrence:\n{err}"
    );
    let table = f.cmd_ok(&["runs", "--project", "job"]);
    assert!(
        table.contains(&format!("occurrence {}", rfc3339(o[1])))
            && table.contains("starting_deadline"),
        "fleet runs does not show the skip:\n{table}"
    );
    assert_check_ok(&f);
}

/// Killed while a scheduled run is in flight and down across three more occurrences (no
/// deadline): at restart the adopted run is still active, so under `forbid` the latest missed
/// occurrence is skipped (recorded) and the two older ones are passed over. Those two must be
/// visible to the operator in `fleet runs`, not only in the daemon's log (older missed occurrences
/// are counted in the reason of the run that handles the latest one) —
/// here the run recording the latest occurrence is the only place to say so.
#[test]
fn missed_occurrences_stay_visible_when_the_latest_is_skipped_by_forbid() {
    let f = Fleet::new("");
    let (rec, go) = (f.file("rec"), f.file("go"));
    let cmd = gated(&rec, &go);
    let (mut d, o) = arm(&f, &[], "job", &[0, 3, 4, 5], |o| {
        format!(
            "{HEADER}{PROBE}[projects.job]\ncommand = {cmd}\nschedule = \"{}\"\n",
            seconds_expr(o)
        )
    });
    f.wait_until(DEADLINE, "the scheduled run to be running", || {
        runs_of(&f, "job")
            .iter()
            .any(|r| s(r, "status") == "running")
            && !starts(&rec).is_empty()
    });
    d.kill();
    let at_kill = runs_of(&f, "job");
    assert!(
        at_kill.len() == 1 && occ(&at_kill[0]) == Some(o[0]),
        "the scenario needs the kill before {} (slow machine?):\n{}",
        rfc3339(o[1]),
        show(&at_kill)
    );

    wait_clock(o[3] + 1000);
    let d2 = f.start_daemon();
    eval_happened(&f);
    let runs = runs_of(&f, "job");
    let all = show(&runs);
    assert_eq!(runs.len(), 2, "{all}");
    assert_eq!(s(&runs[0], "status"), "running", "the adopted run: {all}");
    let skip = &runs[1];
    assert_eq!(
        occ(skip),
        Some(o[3]),
        "the latest missed occurrence is the one handled: {all}"
    );
    assert!(
        is_skip(skip) && s(skip, "reason").contains("forbid"),
        "{all}"
    );
    assert!(
        d2.stderr().contains("missed occurrences skipped"),
        "the daemon did not log the skipped occurrences:\n{}",
        d2.stderr()
    );
    std::fs::write(&go, "").unwrap();
    f.wait_status(id(&runs[0]), "succeeded");
    let table = f.cmd_ok(&["runs", "--project", "job"]);
    assert!(
        s(skip, "reason").contains("2 earlier occurrence(s) missed and skipped")
            && s(skip, "reason").contains(&rfc3339(o[1]))
            && s(skip, "reason").contains(&rfc3339(o[2])),
        "occurrences {} and {} were missed while the daemon was down and are not visible in \
         `fleet runs` (only in the daemon's log): the skip recorded for {} says only {:?}\n{table}",
        rfc3339(o[1]),
        rfc3339(o[2]),
        rfc3339(o[3]),
        s(skip, "reason")
    );
}
