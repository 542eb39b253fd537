//! `fleet projects`: each project with its schedule, next occurrence in UTC and in its time
//! zone, last ended run, active and queued counts, and pause.

use serde_json::Value;

use crate::common::time::parse_rfc3339;
use crate::common::*;

const DAY_MS: i64 = 86_400_000;

#[test]
fn projects_shows_schedule_next_occurrence_last_run_counts_and_pause() {
    let f = Fleet::new(
        "[namespaces.ops]\nmax_concurrency = 2\n\
         [projects.nightly]\ncommand = [\"true\"]\nschedule = \"0 6 * * *\"\ntimezone = \"Asia/Tokyo\"\n\
         [projects.adhoc]\ncommand = [\"sh\", \"-c\", \"exit 3\"]\nnamespace = \"ops\"\nmax_parallel = 2\n\
         [projects.held]\ncommand = [\"true\"]\n",
    );
    let before = now_ms();
    let _d = f.start_daemon();
    let failed = f.enqueue("adhoc");
    f.wait_terminal(failed);
    f.cmd_ok(&["pause", "held"]);
    f.enqueue("held");

    let out = f.cmd_ok(&["projects", "--json"]);
    let list: Vec<Value> = match serde_json::from_str(out.trim()) {
        Ok(Value::Array(v)) => v,
        other => panic!("not a JSON array: {other:?}\n{out}"),
    };
    let get = |name: &str| {
        list.iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {out}"))
            .clone()
    };
    assert_eq!(list.len(), 3, "{out}");

    // 06:00 in Tokyo (UTC+9, no daylight saving) is 21:00 UTC: the first one after the daemon
    // started (the schedule's cursor), computed here without fleet's code.
    let nightly = get("nightly");
    let mut expected = before / DAY_MS * DAY_MS + 21 * 3_600_000;
    if expected <= before {
        expected += DAY_MS;
    }
    let next = parse_rfc3339(nightly["next"].as_str().expect("next"));
    // The daemon's cursor is a moment after `before`: at 21:00 sharp it may already be a day on.
    assert!(next == expected || next == expected + DAY_MS, "{nightly}");
    let local = nightly["next_local"].as_str().expect("next_local");
    assert!(local.ends_with("T06:00:00+09:00"), "{nightly}");
    assert_eq!(parse_rfc3339(local), next, "{nightly}");
    assert_eq!(nightly["timezone"], "Asia/Tokyo");
    assert_eq!(nightly["schedule"], "0 6 * * *");
    assert_eq!(nightly["next_due"], false);
    assert_eq!(nightly["last_run"], Value::Null);

    let adhoc = get("adhoc");
    assert_eq!(adhoc["namespace"], "ops", "{adhoc}");
    assert_eq!(adhoc["max_parallel"], 2, "{adhoc}");
    assert_eq!(adhoc["next"], Value::Null, "{adhoc}");
    assert_eq!(adhoc["last_run"]["id"], failed, "{adhoc}");
    assert_eq!(adhoc["last_run"]["status"], "failed", "{adhoc}");
    assert!(adhoc["last_run"]["finished_at"].is_string(), "{adhoc}");
    assert_eq!(
        (adhoc["active"].as_u64(), adhoc["queued"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(adhoc["paused"], false);

    let held = get("held");
    assert_eq!(held["paused"], true, "{held}");
    assert_eq!(held["paused_by"], "project", "{held}");
    assert_eq!(held["queued"], 1, "{held}");

    let text = f.cmd_ok(&["projects"]);
    let line = |name: &str| {
        text.lines()
            .find(|l| {
                l.trim_start_matches(['│', ' '])
                    .starts_with(&format!("{name} "))
            })
            .unwrap_or_else(|| panic!("{name} not in:\n{text}"))
            .to_string()
    };
    assert!(
        line("nightly").contains("(Asia/Tokyo)") && line("nightly").contains("+09:00"),
        "{text}"
    );
    assert!(line("held").contains("yes"), "{text}");
    assert!(
        line("adhoc").contains("failed") && line("adhoc").contains("0 of 2"),
        "{text}"
    );

    // On a terminal: one line per project at 40 and 80 columns (and 80 when it reports 0×0).
    for (cols, width) in [(40, 40), (80, 80), (0, 80)] {
        let table = super::on_terminal(&f, cols, None, &["projects"]);
        assert_eq!(table.lines().count(), 3 + 4, "{cols} columns:\n{table}");
        for l in table.lines() {
            assert!(l.chars().count() <= width, "{cols} columns:\n{table}");
        }
        assert!(
            table.contains("PROJECT") && table.contains("held"),
            "{table}"
        );
    }
}
