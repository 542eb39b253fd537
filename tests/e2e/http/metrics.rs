//! `/metrics` during a drain: it parses as a whole, its counters agree with `fleet runs --json`
//! at every scrape (bracketed by the scrapes before and after the listing) and exactly once the
//! drain is over, and no scrape ever shows a namespace past its cap.

use std::collections::BTreeMap;

use prometheus_parse::{LineInfo, Scrape, Value};

use crate::common::http_client::{get, http_address};
use crate::common::*;

/// (project, status) → how many runs ended so.
type Totals = BTreeMap<(String, String), u64>;

/// Parses a whole exposition: every line is a comment the format defines (HELP, TYPE, UNIT,
/// EOF) or a sample of a family with a TYPE; anything else fails the test. Returns the samples.
pub fn parse_exposition(text: &str) -> Scrape {
    let mut typed = std::collections::BTreeSet::new();
    assert!(
        text.trim_end().ends_with("# EOF"),
        "the exposition must end with # EOF:\n{text}"
    );
    for line in text.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        match LineInfo::parse(line) {
            LineInfo::Doc { .. } => {}
            LineInfo::Type { metric_name, .. } => {
                typed.insert(metric_name.trim_end_matches("_bucket").to_string());
            }
            LineInfo::Sample {
                metric_name, value, ..
            } => {
                assert!(
                    value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
                    "bad value in {line:?}"
                );
                let family = ["_total", "_bucket", "_sum", "_count", "_created"]
                    .iter()
                    .find_map(|s| metric_name.strip_suffix(s))
                    .filter(|f| typed.contains(*f))
                    .unwrap_or(metric_name);
                assert!(typed.contains(family), "sample without a TYPE: {line:?}");
                assert!(metric_name.starts_with("fleet_"), "not fleet_: {line:?}");
            }
            other => panic!("line not in the exposition format: {line:?} ({other:?})"),
        }
    }
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("prometheus-parse")
}

/// The value of a sample as a number, whatever its type.
pub fn number(v: &Value) -> f64 {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => *x,
        other => panic!("not a single number: {other:?}"),
    }
}

/// Scrapes `/metrics` once, parsed.
pub fn scrape(addr: &str) -> Scrape {
    let a = get(addr, "/metrics");
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(
        a.header("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text")),
        "{:?}",
        a.headers
    );
    parse_exposition(&a.text())
}

/// The samples of `name` as (label value of `label`) → value.
pub fn by_label(s: &Scrape, name: &str, label: &str) -> BTreeMap<String, f64> {
    s.samples
        .iter()
        .filter(|x| x.metric == name)
        .map(|x| {
            (
                x.labels.get(label).unwrap_or("").to_string(),
                number(&x.value),
            )
        })
        .collect()
}

fn scraped_totals(s: &Scrape) -> Totals {
    s.samples
        .iter()
        .filter(|x| x.metric == "fleet_runs_ended_total")
        .map(|x| {
            (
                (
                    x.labels.get("project").unwrap().to_string(),
                    x.labels.get("status").unwrap().to_string(),
                ),
                number(&x.value) as u64,
            )
        })
        .collect()
}

fn listed_totals(runs: &[serde_json::Value]) -> Totals {
    let mut t = Totals::new();
    for r in runs.iter().filter(|r| is_terminal(r)) {
        *t.entry((
            r["project"].as_str().unwrap().to_string(),
            status_of(r).to_string(),
        ))
        .or_default() += 1;
    }
    t
}

/// Every count of `low` is at most the one of `high` (missing = 0).
fn at_most(low: &Totals, high: &Totals) -> bool {
    low.iter()
        .all(|(k, n)| high.get(k).copied().unwrap_or(0) >= *n)
}

#[test]
fn metrics_during_a_drain_agree_with_runs_json() {
    const RUNS: usize = 40;
    // The last run waits for `go`, which the test creates once a scrape has seen the drain under
    // way: on a loaded machine the 40 enqueues can take longer than the runs.
    let go = |dir: &std::path::Path| {
        format!(
            "if [ \"$FLEET_RUN_ID\" -ge {RUNS} ]; then while [ ! -e {} ]; do sleep 0.05; done; fi",
            shell_quote(&dir.join("go"))
        )
    };
    let f = Fleet::with(|dir| {
        format!(
            "http_listen = \"127.0.0.1:0\"\nmax_concurrency = 3\ntick = \"200ms\"\n\
             [namespaces.ops]\nmax_concurrency = 2\n\
             [projects.ok]\ncommand = {ok}\nnamespace = \"ops\"\n\
             [projects.bad]\ncommand = {bad}\nnamespace = \"ops\"\n\
             [projects.free]\ncommand = {ok}\n",
            ok = sh(&format!("sleep 0.05; {}", go(dir))),
            bad = sh(&format!("sleep 0.05; {}; exit 3", go(dir))),
        )
    });
    let d = f.start_daemon();
    let addr = http_address(&d);
    let before = scrape(&addr);
    assert_eq!(
        by_label(&before, "fleet_namespace_max_concurrency", "namespace")["ops"],
        2.0
    );
    for i in 0..RUNS {
        f.enqueue(["ok", "bad", "free"][i % 3]);
    }
    let mut mid_drain = 0;
    let mut finished = false;
    let began = std::time::Instant::now();
    while !finished {
        assert!(
            began.elapsed() < DEADLINE,
            "the drain did not end within {DEADLINE:?}"
        );
        let first = scrape(&addr);
        let runs = f.runs();
        let second = scrape(&addr);
        let (s1, listed, s2) = (
            scraped_totals(&first),
            listed_totals(&runs),
            scraped_totals(&second),
        );
        assert!(
            at_most(&s1, &listed) && at_most(&listed, &s2),
            "scrape {s1:?} <= runs --json {listed:?} <= scrape {s2:?} must hold"
        );
        for s in [&first, &second] {
            let active = by_label(s, "fleet_namespace_active_runs", "namespace");
            assert!(
                active.get("ops").copied().unwrap_or(0.0) <= 2.0,
                "{active:?}"
            );
            let global = s
                .samples
                .iter()
                .find(|x| x.metric == "fleet_active_runs")
                .unwrap();
            assert!(number(&global.value) <= 3.0);
        }
        finished = runs.len() == RUNS && runs.iter().all(is_terminal);
        if !finished && !s2.is_empty() {
            mid_drain += 1;
            std::fs::write(f.file("go"), "").unwrap();
        }
        assert!(f.runs().len() <= RUNS);
    }
    assert!(
        mid_drain > 0,
        "no scrape happened while the drain was under way"
    );

    // Drained: exactly equal, and the claims and timestamps say the same as the runs.
    let runs = f.runs();
    let s = scrape(&addr);
    assert_eq!(scraped_totals(&s), listed_totals(&runs));
    let total: u64 = scraped_totals(&s).values().sum();
    assert_eq!(total, RUNS as u64);
    let claims = s
        .samples
        .iter()
        .find(|x| x.metric == "fleet_claims_total")
        .unwrap();
    assert_eq!(
        number(&claims.value) as usize,
        RUNS,
        "every run was claimed once"
    );
    let queued = by_label(&s, "fleet_namespace_queued_runs", "namespace");
    assert!(queued.values().all(|q| *q == 0.0), "{queued:?}");
    let last_ok = by_label(
        &s,
        "fleet_project_last_success_timestamp_seconds",
        "project",
    );
    let last_bad = by_label(
        &s,
        "fleet_project_last_failure_timestamp_seconds",
        "project",
    );
    let latest = |project: &str, status: &str| {
        runs.iter()
            .filter(|r| r["project"] == project && status_of(r) == status)
            .filter_map(|r| r["finished_at"].as_str())
            .map(|t| chrono_ms(t) as f64 / 1000.0)
            .fold(0.0, f64::max)
    };
    assert_eq!(last_ok["ok"], latest("ok", "succeeded"));
    assert_eq!(last_ok["free"], latest("free", "succeeded"));
    assert_eq!(last_bad["bad"], latest("bad", "failed"));
    assert!(!last_ok.contains_key("bad") && !last_bad.contains_key("ok"));
    let evals = s
        .samples
        .iter()
        .find(|x| x.metric == "fleet_eval_duration_seconds")
        .expect("the EVAL histogram");
    let Value::Histogram(buckets) = &evals.value else {
        panic!("{evals:?}")
    };
    assert!(buckets.last().unwrap().count >= 1.0);
    let epoch = s
        .samples
        .iter()
        .find(|x| x.metric == "fleet_daemon_epoch")
        .unwrap();
    assert_eq!(
        number(&epoch.value) as i64,
        f.status()["daemon"]["epoch"].as_i64().unwrap()
    );
}

/// Milliseconds of an RFC 3339 instant.
pub fn chrono_ms(t: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(t)
        .unwrap_or_else(|e| panic!("{t}: {e}"))
        .timestamp_millis()
}
