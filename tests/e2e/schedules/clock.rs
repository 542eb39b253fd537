//! A wall clock that steps back. A host that booted with its clock a year ahead runs a schedule
//! for a while, then the clock is corrected (an NTP step): the schedule resumes from the
//! corrected clock — with the daemon running, and after a restart — and says so in the log and
//! in `fleet status`; no occurrence runs twice; a retry's delay set by the clock that was ahead
//! is counted again from now. And a jump forward past more than a hundred occurrences names
//! the first one missed.
//!
//! The daemon's clock is shifted through fleet's test clock (`FLEET_TEST_CLOCK_OFFSET_FILE`,
//! honoured only by the `failpoints` build the tests use): the file holds milliseconds added to
//! the daemon's clock, read again at every reading, so rewriting it steps the clock of the
//! running daemon. The `fleet` commands the tests run read the real clock.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::arming::*;
use super::runs::*;
use crate::common::time::*;
use crate::common::*;

/// fleet's test clock: names the file holding the offset (see the module docs).
const OFFSET_FILE_VAR: &str = "FLEET_TEST_CLOCK_OFFSET_FILE";

const YEAR_MS: i64 = 365 * 86_400_000;

/// The offset file of this fleet, set to `ms`.
fn set_offset(f: &Fleet, ms: i64) -> PathBuf {
    let p = f.file("clock-offset");
    // Written whole by a rename, so a daemon reading it never sees half a number.
    let tmp = f.file("clock-offset.tmp");
    std::fs::write(&tmp, ms.to_string()).unwrap();
    std::fs::rename(&tmp, &p).unwrap();
    p
}

fn start_shifted<'a>(f: &'a Fleet, offset_file: &Path) -> Daemon<'a> {
    f.start_daemon_env(&[(OFFSET_FILE_VAR, offset_file.to_str().unwrap())])
}

/// The scheduled runs of `project` that have succeeded.
fn succeeded(f: &Fleet, project: &str) -> Vec<Value> {
    runs_of(f, project)
        .into_iter()
        .filter(|r| s(r, "status") == "succeeded")
        .collect()
}

/// The schedule of `project` in `fleet status --json`.
fn status_schedule(f: &Fleet, project: &str) -> Value {
    let st = f.status();
    st["schedules"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["project"] == project).cloned())
        .unwrap_or_else(|| panic!("no schedule of {project} in fleet status --json: {st}"))
}

/// Every scheduled run of `project` has its own occurrence.
fn assert_one_run_per_occurrence(f: &Fleet, project: &str) {
    let runs = runs_of(f, project);
    let mut seen = std::collections::BTreeSet::new();
    for r in runs.iter().filter(|r| s(r, "trigger") == "schedule") {
        let o = occ(r).unwrap_or_else(|| panic!("a scheduled run without occurrence: {r}"));
        assert!(
            seen.insert(o),
            "two runs for the occurrence {}:\n{}",
            rfc3339(o),
            show(&runs)
        );
    }
}

/// Waits until `project` has a succeeded scheduled run whose occurrence is at or after `since`
/// (ms, the real clock) and within a minute of the real clock: the schedule runs on the
/// corrected clock. (The first occurrence after a restart from the clock is after the instant
/// it restarted, so `since` taken just before is never passed by an earlier run.)
fn wait_run_on_real_clock(f: &Fleet, project: &str, since: i64) -> Value {
    let mut found = Value::Null;
    f.wait_until(DEADLINE, "a scheduled run on the corrected clock", || {
        let upto = now_ms() + 60_000;
        match succeeded(f, project)
            .into_iter()
            .find(|r| occ(r).is_some_and(|o| o >= since && o <= upto))
        {
            Some(r) => {
                found = r;
                true
            }
            None => false,
        }
    });
    found
}

/// The clock runs a year ahead, then is corrected while the daemon runs: the schedule resumes
/// from the corrected clock within a tick, the daemon logs it loudly, `fleet status` shows it.
/// Then the same after a restart: the clock ahead again, the daemon stopped, the clock
/// corrected, `fleet status` (no daemon) flags the schedule, and a new daemon resumes it.
#[test]
fn a_clock_corrected_backwards_resumes_the_schedule() {
    let f = Fleet::new(&format!(
        "{HEADER}[projects.tick]\ncommand = [\"true\"]\nschedule = \"*/2 * * * * *\"\n"
    ));
    let offset = set_offset(&f, YEAR_MS);
    let d = start_shifted(&f, &offset);
    f.wait_until(
        DEADLINE,
        "two scheduled runs on the clock a year ahead",
        || succeeded(&f, "tick").len() >= 2,
    );
    let ahead = succeeded(&f, "tick");
    for r in &ahead {
        assert!(
            occ(r).unwrap() > now_ms() + YEAR_MS / 2,
            "the clock was not ahead: {r}"
        );
    }

    // The NTP step, with the daemon running.
    // Not rounded down: an occurrence run a moment ago must not pass for one run after this.
    let stepped = now_ms();
    set_offset(&f, 0);
    wait_run_on_real_clock(&f, "tick", stepped);
    let err = d.stderr();
    assert!(
        err.contains("ERROR") && err.contains("the clock went back"),
        "the daemon did not say the clock went back:\n{err}"
    );
    let sch = status_schedule(&f, "tick");
    let back = &sch["clock_went_back"];
    assert!(back.is_object(), "fleet status does not show it: {sch}");
    assert!(
        parse_rfc3339(back["last_handled_was"].as_str().unwrap()) > now_ms() + YEAR_MS / 2,
        "{sch}"
    );
    assert_eq!(sch["ahead_of_clock"], false, "{sch}");
    let text = f.cmd_ok(&["status"]);
    assert!(
        text.contains("schedule tick: the clock went back"),
        "fleet status (text) does not show it:\n{text}"
    );
    // The daemon started by the clock a year ahead: its uptime is unknown, not zero.
    let daemon = &f.status()["daemon"];
    assert!(daemon["uptime_seconds"].is_null(), "{daemon}");
    assert!(text.contains("up ? (the clock went back"), "{text}");

    // Ahead again, then corrected while no daemon runs.
    drop(d);
    set_offset(&f, YEAR_MS);
    let d = start_shifted(&f, &offset);
    let before = succeeded(&f, "tick").len();
    f.wait_until(DEADLINE, "a scheduled run on the clock ahead again", || {
        succeeded(&f, "tick")
            .iter()
            .skip(before)
            .any(|r| occ(r).unwrap() > now_ms() + YEAR_MS / 2)
    });
    drop(d);
    set_offset(&f, 0);
    let sch = status_schedule(&f, "tick");
    assert_eq!(
        sch["ahead_of_clock"], true,
        "fleet status does not flag a cursor ahead of the clock: {sch}"
    );
    // No daemon runs: `fleet status` exits 3, with its report.
    let out = f.cmd(&["status"]);
    assert_eq!(out.code(), Some(3), "{out:?}");
    let text = out.stdout;
    assert!(
        text.contains("schedule tick: the clock went back") && text.contains("later than now"),
        "{text}"
    );
    let restarted = now_ms();
    let d = start_shifted(&f, &offset);
    let resumed = wait_run_on_real_clock(&f, "tick", restarted);
    assert!(
        d.stderr().contains("the clock went back"),
        "resumed by {resumed} without saying the clock went back\n{}",
        f.diagnostics()
    );
    assert_eq!(status_schedule(&f, "tick")["ahead_of_clock"], false);
    assert_one_run_per_occurrence(&f, "tick");
    assert_check_ok(&f);
}

/// A clock half a minute ahead, then corrected: the schedule restarts from the clock and so
/// proposes again the occurrences it ran while the clock was ahead. None runs twice (the
/// daemon says it already has its run), and once the clock passes them, new ones run.
#[test]
fn occurrences_run_under_the_clock_ahead_never_run_again() {
    let f = Fleet::new(&format!(
        "{HEADER}[projects.tick]\ncommand = [\"true\"]\nschedule = \"*/2 * * * * *\"\n"
    ));
    let offset = set_offset(&f, 25_000);
    let d = start_shifted(&f, &offset);
    f.wait_until(DEADLINE, "three scheduled runs on the clock ahead", || {
        succeeded(&f, "tick").len() >= 3
    });
    set_offset(&f, 0);
    f.wait_until(DEADLINE, "the daemon to see the clock went back", || {
        status_schedule(&f, "tick")["clock_went_back"].is_object()
    });
    let last_ahead = runs_of(&f, "tick").iter().filter_map(occ).max().unwrap();
    // The clock passes the occurrences run while it was ahead, and the schedule goes on.
    f.wait_until(DEADLINE, "a run after the last one run ahead", || {
        succeeded(&f, "tick")
            .iter()
            .any(|r| occ(r).unwrap() > last_ahead)
    });
    assert_one_run_per_occurrence(&f, "tick");
    let err = d.stderr();
    assert!(
        err.contains("occurrence already has its run"),
        "the occurrences proposed again went unremarked:\n{err}"
    );
    assert_check_ok(&f);
}

/// A retry queued by the clock a year ahead, then the clock corrected: the retry starts after
/// its backoff counted from now, not a year later, and its note says why.
#[test]
fn a_retry_delay_set_by_a_clock_ahead_counts_from_now() {
    let f = Fleet::new(&format!(
        "{HEADER}[projects.flaky]\ncommand = [\"sh\", \"-c\", \"exit 3\"]\nretries = 1\nretry_backoff = \"6s\"\n"
    ));
    let offset = set_offset(&f, YEAR_MS);
    let d = start_shifted(&f, &offset);
    let first = f.enqueue("flaky");
    f.wait_status(first, "failed");
    let retry = runs_of(&f, "flaky")
        .into_iter()
        .find(|r| s(r, "trigger") == "retry")
        .unwrap_or_else(|| panic!("no retry queued:\n{}", f.diagnostics()));
    assert_eq!(s(&retry, "status"), "queued", "{retry}");
    assert!(
        t(&retry, "not_before").unwrap() > now_ms() + YEAR_MS / 2,
        "{retry}"
    );
    set_offset(&f, 0);
    let stepped = now_ms();
    let r = f.wait_terminal(id(&retry));
    assert_eq!(s(&r, "status"), "failed", "{r}");
    let started = t(&r, "started_at").unwrap();
    assert!(
        started >= stepped + 5_000,
        "the retry started before its backoff, counted from now, had passed: {r}"
    );
    assert!(
        s(&r, "reason").contains("the clock went back"),
        "the retry's note does not say why its delay moved: {r}"
    );
    assert!(d.stderr().contains("the clock went back"), "{}", d.stderr());
}

/// The clock jumps forward past more than a hundred occurrences of a per-second schedule: the
/// latest runs, and its note's range starts at the first occurrence missed (the one after the
/// cursor), not at the hundredth from last.
#[test]
fn a_catch_up_note_names_the_first_missed_occurrence() {
    let f = Fleet::new(&format!(
        "{HEADER}[projects.tick]\ncommand = [\"true\"]\nschedule = \"* * * * * *\"\n"
    ));
    let offset = set_offset(&f, 0);
    let mut d = start_shifted(&f, &offset);
    f.wait_until(DEADLINE, "a scheduled run", || {
        !succeeded(&f, "tick").is_empty()
    });
    d.kill();
    let (cursor, _) = schedule_row(&f, "tick").expect("the schedule's cursor");
    let before = runs_of(&f, "tick").len();
    set_offset(&f, 150_000);
    let _d = start_shifted(&f, &offset);
    let mut caught = Value::Null;
    f.wait_until(DEADLINE, "the catch-up run", || {
        match runs_of(&f, "tick")
            .into_iter()
            .skip(before)
            .find(|r| s(r, "reason").contains("missed and skipped"))
        {
            Some(r) => {
                caught = r;
                true
            }
            None => false,
        }
    });
    let note = s(&caught, "reason");
    let first = rfc3339(cursor + 1000);
    assert!(
        note.contains(&format!("skipped ({first} .. ")),
        "the note's range does not start at the first missed occurrence {first}: {note}"
    );
    let count: i64 = note
        .split(" earlier occurrence(s)")
        .next()
        .and_then(|n| n.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in the note: {note}"));
    assert!(count > 140, "{note}");
}
