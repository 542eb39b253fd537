//! End-to-end tests of schedules (issue 5, the brief's "Schedules (cron) contract") on the real
//! `fleet` binary: seconds-level cron timetables fire exactly one run per occurrence; a daemon
//! killed across occurrences catches up on the latest one within `starting_deadline` and skips
//! (visibly) the older ones, or skips it when it is too late; a scheduled run in flight across a
//! crash is adopted and its occurrence never fired again; the overlap policies `forbid`, `queue`
//! and `replace`; retries with exponential backoff; time zones; `fleet runs` showing trigger and
//! occurrence.
//!
//! No test waits for a real minute. Tests that need a daemon down across an occurrence "arm" a
//! schedule whose only occurrences are a few chosen whole seconds a little ahead (a seconds list,
//! so the next ones are a minute away): they start the daemon, wait until it persisted its
//! cursor with the first chosen second as the next one, and only then kill it. The wall clock is
//! then polled until the scenario's instant has passed (the scenario *is* the passing time).
//!
//! Run with `cargo test --all-features --test schedules` after `cargo build -p fleet
//! --all-features` (one test injects a crash through a failpoint).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Time: the wall clock in milliseconds, RFC 3339 as fleet prints it ("…T…:…:….mmmZ").

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Polls the wall clock until it reads at least `at` (ms). This is the scenario ("stay down
/// until the occurrence has passed"), not synchronisation with the daemon.
fn wait_clock(at: i64) {
    let limit = Instant::now() + Duration::from_secs(120);
    while now_ms() < at {
        assert!(Instant::now() < limit, "wait_clock({at}): too far ahead");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// An instant (ms UTC) as fleet prints it: `2026-11-30T11:17:19.000Z`.
fn rfc3339(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// Parses RFC 3339 with a `Z` or `±hh:mm` offset and optional fraction; ms UTC.
fn parse_rfc3339(s: &str) -> i64 {
    let bad = || panic!("not an RFC 3339 time: {s:?}");
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        bad();
    }
    let num = |r: std::ops::Range<usize>| -> i64 { s[r].parse().unwrap_or_else(|_| bad()) };
    let (y, mo, d, h, mi, sec) = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    );
    let mut i = 19;
    let mut frac_ms = 0;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = &s[start..i];
        let padded = format!("{:0<3}", &digits[..digits.len().min(3)]);
        frac_ms = padded.parse().unwrap_or_else(|_| bad());
    }
    let offset_ms = match &s[i..] {
        "Z" | "z" => 0,
        o if o.len() == 6 => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (num(i + 1..i + 3) * 3_600_000 + num(i + 4..i + 6) * 60_000)
        }
        _ => bad(),
    };
    (days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec) * 1000 + frac_ms - offset_ms
}

/// America/New_York's UTC offset (ms) at an instant, by the US rules in force since 2007: EDT
/// (-4 h) from the second Sunday of March 02:00 EST to the first Sunday of November 02:00 EDT,
/// EST (-5 h) otherwise. Independent of the host's tzdata and of chrono-tz.
fn new_york_offset_ms(t: i64) -> i64 {
    let (y, _, _) = civil_from_days(t.div_euclid(86_400_000));
    // 1970-01-01 was a Thursday: weekday (0 = Sunday) of day n is (n + 4) mod 7.
    let nth_sunday = |month: i64, n: i64| {
        let first = days_from_civil(y, month, 1);
        let to_sunday = (7 - (first + 4).rem_euclid(7)) % 7;
        first + to_sunday + 7 * (n - 1)
    };
    let dst_start = nth_sunday(3, 2) * 86_400_000 + 7 * 3_600_000; // 02:00 EST = 07:00 UTC
    let dst_end = nth_sunday(11, 1) * 86_400_000 + 6 * 3_600_000; // 02:00 EDT = 06:00 UTC
    if dst_start <= t && t < dst_end {
        -4 * 3_600_000
    } else {
        -5 * 3_600_000
    }
}

#[test]
fn time_helpers_agree_with_known_instants() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(parse_rfc3339("2026-11-01T05:30:00.000Z"), 1_793_511_000_000);
    assert_eq!(rfc3339(1_793_511_000_000), "2026-11-01T05:30:00.000Z");
    assert_eq!(
        parse_rfc3339("2026-11-01T01:30:00-04:00"),
        parse_rfc3339("2026-11-01T05:30:00Z")
    );
    // 2026-11-01 05:59:59Z is still EDT; 06:00Z is EST. 2026-03-08 07:00Z starts EDT.
    assert_eq!(
        new_york_offset_ms(parse_rfc3339("2026-11-01T05:59:59Z")),
        -4 * 3_600_000
    );
    assert_eq!(
        new_york_offset_ms(parse_rfc3339("2026-11-01T06:00:00Z")),
        -5 * 3_600_000
    );
    assert_eq!(
        new_york_offset_ms(parse_rfc3339("2026-03-08T06:59:59Z")),
        -5 * 3_600_000
    );
    assert_eq!(
        new_york_offset_ms(parse_rfc3339("2026-03-08T07:00:00Z")),
        -4 * 3_600_000
    );
}

// ---------------------------------------------------------------------------------------------
// Runs as `fleet runs --json` shows them.

fn s<'a>(r: &'a Value, k: &str) -> &'a str {
    r[k].as_str().unwrap_or("")
}

fn id(r: &Value) -> i64 {
    r["id"].as_i64().expect("run id")
}

/// A time field of a run (ms), or None when null.
fn t(r: &Value, k: &str) -> Option<i64> {
    r[k].as_str().map(parse_rfc3339)
}

fn occ(r: &Value) -> Option<i64> {
    t(r, "occurrence")
}

/// The project's runs, oldest first.
fn runs_of(f: &Fleet, project: &str) -> Vec<Value> {
    let mut v = f.runs_with(&["--project", project]);
    v.sort_by_key(id);
    v
}

/// A run recording a skipped occurrence: cancelled, never started, reason "skipped: …".
fn is_skip(r: &Value) -> bool {
    s(r, "status") == "cancelled" && s(r, "reason").starts_with("skipped:")
}

fn show(runs: &[Value]) -> String {
    runs.iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------------
// Commands that record what they saw.

/// A path as a single-quoted shell word.
fn q(p: &Path) -> String {
    let s = p.display().to_string();
    assert!(!s.contains('\''), "path must not contain a quote: {s}");
    format!("'{s}'")
}

/// Shell that appends `KIND <run id> <FLEET_OCCURRENCE or none> <attempt> <ns-time>` to `rec`.
fn note(kind: &str, rec: &Path) -> String {
    format!(
        "echo {kind} $FLEET_RUN_ID ${{FLEET_OCCURRENCE:-none}} $FLEET_ATTEMPT $(date +%s%N) >> {}",
        q(rec)
    )
}

/// One line written by [`note`].
#[derive(Debug, Clone)]
struct Note {
    kind: String,
    run: i64,
    occurrence: Option<String>,
    attempt: i64,
    ns: i128,
}

impl Note {
    fn ms(&self) -> i64 {
        (self.ns / 1_000_000) as i64
    }
}

fn read_notes(rec: &Path) -> Vec<Note> {
    std::fs::read_to_string(rec)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "malformed record line {l:?}");
            Note {
                kind: f[0].to_string(),
                run: f[1].parse().unwrap(),
                occurrence: (f[2] != "none").then(|| f[2].to_string()),
                attempt: f[3].parse().unwrap(),
                ns: f[4].parse().unwrap(),
            }
        })
        .collect()
}

fn starts(rec: &Path) -> Vec<Note> {
    read_notes(rec)
        .into_iter()
        .filter(|n| n.kind == "start")
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Config, the database's schedule cursor, arming a schedule.

const HEADER: &str = "max_concurrency = 4\n";

/// A project that succeeds at once, to prove EVALs happen (see [`eval_happened`]).
const PROBE: &str = "[projects.probe]\ncommand = [\"true\"]\n";

/// Proof that the running daemon completed an EVAL — including its "fire schedules" step, which
/// comes before the claims — after this call began: a manual run of `probe` is claimed and ends.
fn eval_happened(f: &Fleet) {
    let id = f.enqueue("probe");
    f.wait_status(id, "succeeded");
}

/// The persisted cursor and next occurrence of `project`'s schedule (table `schedules`), read
/// read-only; None while there is no row (or no database yet).
fn schedule_row(f: &Fleet, project: &str) -> Option<(i64, Option<i64>)> {
    let c = rusqlite::Connection::open_with_flags(
        f.state_dir().join("fleet.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()?;
    c.busy_timeout(Duration::from_secs(5)).ok()?;
    c.query_row(
        "SELECT cursor, next_fire FROM schedules WHERE project = ?1",
        [project],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .ok()
}

/// A 6-field cron expression whose occurrences are exactly the given whole seconds (each minute;
/// the instants must lie within one minute of each other).
fn seconds_expr(occ: &[i64]) -> String {
    let secs: BTreeSet<i64> = occ.iter().map(|t| t / 1000 % 60).collect();
    let list: Vec<String> = secs.iter().map(|s| s.to_string()).collect();
    format!("{} * * * * *", list.join(","))
}

/// Arms a schedule: picks whole-second instants `offsets` seconds after a base at least a couple
/// of seconds ahead, writes `config(instants)`, starts a daemon (with `env`) and waits until it
/// persisted `project`'s cursor before the first instant with that instant as the next one.
/// Returns the daemon and the instants, with at least ~400 ms left before the first one. A slow
/// start is retried with a longer lead (a new timetable starts afresh, firing nothing past).
fn arm<'a>(
    f: &'a Fleet,
    env: &[(&str, &str)],
    project: &str,
    offsets: &[i64],
    config: impl Fn(&[i64]) -> String,
) -> (Daemon<'a>, Vec<i64>) {
    let mut lead = 2_000;
    for _ in 0..4 {
        let base = (now_ms() + lead) / 1000 * 1000 + 1000;
        let occ: Vec<i64> = offsets.iter().map(|o| base + o * 1000).collect();
        f.write_config(&config(&occ));
        let before = schedule_row(f, project);
        let mut d = f.start_daemon_env(env);
        let ready = loop {
            let late = now_ms() >= occ[0] - 400;
            match schedule_row(f, project) {
                Some((cursor, Some(next))) if next == occ[0] && cursor < occ[0] && !late => {
                    break true
                }
                // The daemon started this timetable (a new cursor, before the first instant)
                // but computed another next occurrence: a product bug, not a slow start.
                Some((cursor, next)) if Some((cursor, next)) != before && cursor < occ[0] => {
                    panic!(
                        "the daemon computed the next occurrence of {project} as {:?}, expected \
                         {} (config:\n{})\n{}",
                        next.map(rfc3339),
                        rfc3339(occ[0]),
                        config(&occ),
                        f.diagnostics()
                    )
                }
                _ if late => break false,
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        if ready {
            return (d, occ);
        }
        d.kill();
        assert!(
            runs_of(f, project).is_empty(),
            "arming the schedule: the daemon was too slow and fired already\n{}",
            f.diagnostics()
        );
        lead *= 2;
    }
    panic!(
        "could not arm the schedule of {project}: the daemon never persisted its cursor in time\n{}",
        f.diagnostics()
    );
}

/// `fleet check` exits 0.
fn assert_check_ok(f: &Fleet) {
    let out = f.cmd(&["check", "--json"]);
    assert_eq!(
        out.code(),
        Some(0),
        "fleet check found violations:\n{}\n{}",
        out.stdout,
        out.stderr
    );
}

/// Runs of `runs` (other than `except`, and not skips) that were queued or active at `at`.
/// `strict`: only those certainly so (enqueued before `at`, ended after it); otherwise also
/// those enqueued or ended at that very millisecond (one EVAL may end one run and fire the
/// next with the same `now`).
fn holders_at(runs: &[Value], at: i64, except: i64, strict: bool) -> Vec<i64> {
    runs.iter()
        .filter(|r| id(r) != except && !is_skip(r))
        .filter(|r| {
            let (q, e) = (t(r, "enqueued_at").unwrap(), t(r, "finished_at"));
            if strict {
                q < at && e.is_none_or(|e| e > at)
            } else {
                q <= at && e.is_none_or(|e| e >= at)
            }
        })
        .map(id)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Fires on schedule, one run per occurrence.

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

// ---------------------------------------------------------------------------------------------
// 2-3. Killed across occurrences.

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
        q(&go)
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

// ---------------------------------------------------------------------------------------------
// 4. Killed while a scheduled run is in flight.

/// A command that notes its start, waits for `go`, notes its end.
fn gated(rec: &Path, go: &Path) -> String {
    sh(&format!(
        "{}; while [ ! -e {} ]; do sleep 0.05; done; {}",
        note("start", rec),
        q(go),
        note("end", rec)
    ))
}

/// The daemon killed while a scheduled run is in flight, restarted at once (the occurrence is
/// still due by any measure: no starting_deadline): the run is adopted (it ends `succeeded`, its
/// real status, with the same pid) and the occurrence is not fired again.
#[test]
fn killed_with_scheduled_run_in_flight_adopts_it_and_never_fires_it_again() {
    let f = Fleet::new("");
    let (rec, go) = (f.file("rec"), f.file("go"));
    let cmd = gated(&rec, &go);
    let (mut d, o) = arm(&f, &[], "job", &[0], |o| {
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
    let before = runs_of(&f, "job");
    assert_eq!(before.len(), 1, "{}", show(&before));
    let (run, pid) = (id(&before[0]), before[0]["pid"].clone());
    assert_eq!(occ(&before[0]), Some(o[0]));
    d.kill();

    let _d2 = f.start_daemon();
    eval_happened(&f);
    eval_happened(&f);
    let after = runs_of(&f, "job");
    assert_eq!(
        after.len(),
        1,
        "the occurrence was fired again:\n{}",
        show(&after)
    );
    assert_eq!(s(&after[0], "status"), "running", "{}", after[0]);
    assert_eq!(after[0]["pid"], pid, "not the same process: {}", after[0]);

    std::fs::write(&go, "").unwrap();
    let r = f.wait_terminal(run);
    assert_eq!(
        s(&r, "status"),
        "succeeded",
        "the adopted run's real status: {r}"
    );
    let runs = runs_of(&f, "job");
    assert_eq!(runs.len(), 1, "{}", show(&runs));
    let st = starts(&rec);
    assert_eq!(st.len(), 1, "the command started more than once: {st:?}");
    assert_eq!(st[0].occurrence.as_deref(), Some(rfc3339(o[0]).as_str()));
    assert_check_ok(&f);
}

/// The daemon crashes right after claiming a scheduled run (failpoint `daemon-after-claim`,
/// before any shim): the restarted daemon requeues that run and starts it once; the occurrence
/// gets no second run.
#[test]
fn crash_after_claiming_a_scheduled_run_starts_it_once() {
    let f = Fleet::new("");
    let rec = f.file("rec");
    let cmd = sh(&note("start", &rec));
    let (mut d, o) = arm(
        &f,
        &[("FAILPOINTS", "daemon-after-claim=return")],
        "job",
        &[0],
        |o| {
            format!(
                "{HEADER}{PROBE}[projects.job]\ncommand = {cmd}\nschedule = \"{}\"\n",
                seconds_expr(o)
            )
        },
    );
    let mut exit = None;
    f.wait_until(DEADLINE, "the daemon to abort at its first claim", || {
        exit = d.try_exit();
        exit.is_some() || !starts(&rec).is_empty()
    });
    assert!(
        exit.is_some() && starts(&rec).is_empty(),
        "the failpoint did not fire (is {} built with --all-features?): {exit:?}\n{}",
        fleet_bin().display(),
        d.stderr()
    );
    let claimed = runs_of(&f, "job");
    assert_eq!(claimed.len(), 1, "{}", show(&claimed));
    assert_eq!(s(&claimed[0], "status"), "starting", "{}", claimed[0]);
    assert_eq!(occ(&claimed[0]), Some(o[0]));

    let _d2 = f.start_daemon();
    f.wait_until(DEADLINE, "the occurrence's run to succeed", || {
        runs_of(&f, "job")
            .iter()
            .any(|r| s(r, "status") == "succeeded")
    });
    eval_happened(&f);
    let runs = runs_of(&f, "job");
    let for_o: Vec<&Value> = runs.iter().filter(|r| occ(r) == Some(o[0])).collect();
    assert!(
        runs.iter().all(|r| occ(r) == Some(o[0])),
        "another occurrence fired:\n{}",
        show(&runs)
    );
    assert_eq!(
        for_o
            .iter()
            .filter(|r| s(r, "status") != "cancelled")
            .count(),
        1,
        "{}",
        show(&runs)
    );
    let st = starts(&rec);
    assert_eq!(st.len(), 1, "started {} times: {st:?}", st.len());
    assert_eq!(st[0].occurrence.as_deref(), Some(rfc3339(o[0]).as_str()));
    assert_check_ok(&f);
}

/// Killed while a scheduled run is in flight and down across three more occurrences (no
/// deadline): at restart the adopted run is still active, so under `forbid` the latest missed
/// occurrence is skipped (recorded) and the two older ones are passed over. Those two must be
/// visible to the operator in `fleet runs` (issue 5: "older ones are skipped, logged, and
/// visible to the operator"; docs/ARCHITECTURE.md: "older missed occurrences are counted in the
/// reason of the run that fires") — here the run recording the latest occurrence is the only
/// place to say so.
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

// ---------------------------------------------------------------------------------------------
// 5-7. Overlap policies.

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
            // The run the reason names was active or queued when the occurrence was skipped.
            let blocker: i64 = reason
                .split("run ")
                .nth(1)
                .and_then(|x| x.split_whitespace().next())
                .and_then(|x| x.parse().ok())
                .unwrap_or_else(|| panic!("the skip names no run: {r}"));
            let at = t(r, "enqueued_at").unwrap();
            assert!(
                holders_at(&runs, at, id(r), false).contains(&blocker),
                "skip {} names run {blocker}, not active at {}:\n{all}",
                id(r),
                rfc3339(at)
            );
        } else {
            // Never queued behind another run: nothing else was active or queued when it fired.
            let at = t(r, "enqueued_at").unwrap();
            let others = holders_at(&runs, at, id(r), true);
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

// ---------------------------------------------------------------------------------------------
// 8. Retries.

/// A failing scheduled run with `retries = 2`, `retry_backoff = "1s"`: attempts 2 and 3 have
/// trigger `retry`, the same occurrence, a `not_before` at least 1 s and 2 s after the previous
/// attempt ended (exponential; the jitter adds at most a quarter), and start no sooner.
#[test]
fn retries_back_off_exponentially_with_not_before() {
    let f = Fleet::new("");
    let rec = f.file("rec");
    let cmd = sh(&format!(
        "{}; {}; exit 3",
        note("start", &rec),
        note("end", &rec)
    ));
    let (_d, o) = arm(&f, &[], "job", &[0], |o| {
        format!(
            "{HEADER}[projects.job]\ncommand = {cmd}\nschedule = \"{}\"\nretries = 2\nretry_backoff = \"1s\"\n",
            seconds_expr(o)
        )
    });
    f.wait_until(DEADLINE, "three attempts to fail", || {
        let runs = runs_of(&f, "job");
        runs.len() >= 3 && runs.iter().all(is_terminal)
    });
    let runs = runs_of(&f, "job");
    let all = show(&runs);
    assert_eq!(runs.len(), 3, "retries = 2 means 3 attempts:\n{all}");
    let notes = read_notes(&rec);
    let note_of = |kind: &str, attempt: i64| {
        notes
            .iter()
            .find(|n| n.kind == kind && n.attempt == attempt)
            .unwrap_or_else(|| panic!("no {kind} of attempt {attempt}: {notes:?}"))
            .clone()
    };
    for (i, r) in runs.iter().enumerate() {
        let attempt = i as i64 + 1;
        assert_eq!(r["attempt"], attempt, "{all}");
        assert_eq!(s(r, "status"), "failed", "{all}");
        assert_eq!(r["exit_code"], 3, "{all}");
        assert_eq!(
            s(r, "trigger"),
            if attempt == 1 { "schedule" } else { "retry" },
            "{all}"
        );
        assert_eq!(occ(r), Some(o[0]), "a retry keeps its occurrence: {all}");
        assert_eq!(
            note_of("start", attempt).occurrence.as_deref(),
            Some(rfc3339(o[0]).as_str()),
            "FLEET_OCCURRENCE of attempt {attempt}"
        );
        if attempt == 1 {
            assert!(r["not_before"].is_null(), "{r}");
            continue;
        }
        let prev = &runs[i - 1];
        let wait = 1000 * (1 << (attempt - 2)); // 1 s, then 2 s
        let nb = t(r, "not_before").unwrap_or_else(|| panic!("a retry without not_before: {r}"));
        let prev_end = t(prev, "finished_at").unwrap();
        assert!(
            nb - prev_end >= wait,
            "attempt {attempt}: not_before only {} ms after attempt {} ended (backoff {wait} ms):\n{all}",
            nb - prev_end,
            attempt - 1
        );
        assert!(
            nb - prev_end <= wait + wait / 4 + 5000,
            "attempt {attempt}: not_before {} ms after the previous end, far beyond backoff + jitter:\n{all}",
            nb - prev_end
        );
        assert!(
            t(r, "started_at").unwrap() >= nb,
            "started before its not_before: {r}"
        );
        // The commands' own clocks agree.
        let gap = note_of("start", attempt).ns - note_of("end", attempt - 1).ns;
        assert!(
            gap >= i128::from(wait) * 1_000_000,
            "attempt {attempt} started {} ms after attempt {} ended; backoff is {wait} ms",
            gap / 1_000_000,
            attempt - 1
        );
    }
    assert_eq!(starts(&rec).len(), 3, "{notes:?}");
}

// ---------------------------------------------------------------------------------------------
// 9. Time zone.

/// `timezone = "America/New_York"`: a per-second interval schedule still fires every second, and
/// a wall-clock schedule "S M H * * *" written in New York time fires at that New York time (a
/// UTC reading of the same fields would be 4-5 hours off). Beside them, a UTC wall-clock
/// schedule for the same instant fires at it although the daemon's own local zone (TZ) is New
/// York. DST specifics are unit-tested in crates/supervisor/src/schedule/tests.rs.
#[test]
fn timezone_schedules_fire_in_that_zone() {
    let f = Fleet::new("");
    let rec = f.file("rec");
    let cmd = sh(&format!(
        "echo occurrence=$FLEET_OCCURRENCE; {}",
        note("start", &rec)
    ));
    let fields = |t: i64| {
        let (sec, min, hour) = (
            t / 1000 % 60,
            t / 60_000 % 60,
            t.rem_euclid(86_400_000) / 3_600_000,
        );
        format!("{sec} {min} {hour} * * *")
    };
    let (_d, o) = arm(&f, &[("TZ", "America/New_York")], "wall", &[0], |o| {
        format!(
            "{HEADER}[projects.wall]\ncommand = {cmd}\nschedule = \"{}\"\ntimezone = \"America/New_York\"\n\
             [projects.utc]\ncommand = {cmd}\nschedule = \"{}\"\n\
             [projects.every]\ncommand = {cmd}\nschedule = \"*/1 * * * * *\"\ntimezone = \"America/New_York\"\n",
            fields(o[0] + new_york_offset_ms(o[0])),
            fields(o[0]),
        )
    });
    f.wait_until(
        DEADLINE,
        "the two wall-clock runs and 3 per-second runs",
        || {
            let done = |p: &str| {
                runs_of(&f, p)
                    .iter()
                    .filter(|r| s(r, "status") == "succeeded")
                    .count()
            };
            done("wall") >= 1 && done("utc") >= 1 && done("every") >= 3
        },
    );
    let day = 86_400_000;
    for p in ["wall", "utc"] {
        let runs = runs_of(&f, p);
        assert_eq!(runs.len(), 1, "{}", show(&runs));
        assert_eq!(
            occ(&runs[0]),
            Some(o[0]),
            "{p} fired at another instant: {}",
            runs[0]
        );
        assert_eq!(
            f.logs(id(&runs[0])).trim(),
            format!("occurrence={}", rfc3339(o[0]))
        );
    }
    // Their next occurrence is the same wall time tomorrow (in New York: barring a DST change).
    assert_eq!(
        schedule_row(&f, "utc").and_then(|(_, n)| n),
        Some(o[0] + day)
    );
    if new_york_offset_ms(o[0]) == new_york_offset_ms(o[0] + day) {
        let next = schedule_row(&f, "wall").and_then(|(_, n)| n);
        assert_eq!(
            next,
            Some(o[0] + day),
            "next occurrence of the daily New York schedule"
        );
    }
    let every = runs_of(&f, "every");
    let occs: BTreeSet<i64> = every.iter().map(|r| occ(r).unwrap()).collect();
    assert_eq!(occs.len(), every.len(), "{}", show(&every));
    assert!(occs.iter().all(|o| o % 1000 == 0));
    for r in every.iter().filter(|r| s(r, "status") == "succeeded") {
        assert_eq!(
            f.logs(id(r)).trim(),
            format!("occurrence={}", s(r, "occurrence"))
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 10. The runs table.

/// `fleet runs` (the table) shows the trigger and, in the NOTE column, the occurrence of a
/// scheduled run; a manual run shows `manual` and no occurrence.
#[test]
fn runs_table_shows_trigger_and_occurrence() {
    let f = Fleet::new(&format!(
        "{HEADER}[projects.job]\ncommand = [\"true\"]\nschedule = \"*/1 * * * * *\"\n\
         [projects.hand]\ncommand = [\"true\"]\n"
    ));
    let _d = f.start_daemon();
    let manual = f.enqueue("hand");
    f.wait_status(manual, "succeeded");
    f.wait_until(DEADLINE, "a scheduled run to succeed", || {
        runs_of(&f, "job")
            .iter()
            .any(|r| s(r, "status") == "succeeded")
    });
    let r = runs_of(&f, "job")
        .into_iter()
        .find(|r| s(r, "status") == "succeeded")
        .unwrap();
    let table = f.cmd_ok(&["runs"]);
    let line = |run: i64| {
        table
            .lines()
            .find(|l| {
                l.trim_start_matches(|c: char| c == '│' || c.is_whitespace())
                    .split_whitespace()
                    .next()
                    == Some(run.to_string().as_str())
            })
            .unwrap_or_else(|| panic!("run {run} not in the table:\n{table}"))
            .to_string()
    };
    let sched = line(id(&r));
    assert!(
        sched.contains("schedule")
            && sched.contains(&format!("occurrence {}", s(&r, "occurrence"))),
        "the scheduled run's row lacks its trigger or occurrence:\n{sched}\n{table}"
    );
    let hand = line(manual);
    assert!(
        hand.contains("manual") && !hand.contains("occurrence"),
        "the manual run's row:\n{hand}\n{table}"
    );
    assert!(
        table.contains("TRIGGER") && table.contains("NOTE"),
        "{table}"
    );
}
