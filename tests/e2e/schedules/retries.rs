//! Retries of a scheduled run: trigger `retry`, the same occurrence, an exponential backoff
//! (`not_before`) the commands' own clocks agree with.

use super::arming::*;
use super::notes::*;
use super::runs::*;
use crate::common::time::*;
use crate::common::*;

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
