//! The alert rules in docs/OPERATIONS.md (promtool is not installable here) are checked
//! against a real `/metrics`: every metric an expression names is served, with every label the
//! expression matches on (`on(…)`, `by(…)`) or its annotations use (`$labels.…`).

use std::collections::{BTreeMap, BTreeSet};

use super::metrics::scrape;
use crate::common::http_client::http_address;
use crate::common::*;

/// One rule of the doc: its name, its expression, and the labels its annotations use.
struct Rule {
    alert: String,
    expr: String,
    labels_used: BTreeSet<String>,
}

/// The rules of the YAML block that holds `groups:` in docs/OPERATIONS.md.
fn rules() -> Vec<Rule> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/OPERATIONS.md"))
        .unwrap();
    let block = doc
        .split("```yaml")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.contains("groups:"))
        .expect("a YAML block with the alert rules in docs/OPERATIONS.md");
    let lines: Vec<&str> = block.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut rules: Vec<Rule> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if let Some(name) = line.strip_prefix("- alert:") {
            rules.push(Rule {
                alert: name.trim().to_string(),
                expr: String::new(),
                labels_used: BTreeSet::new(),
            });
        } else if let Some(expr) = line.strip_prefix("expr:") {
            let rule = rules.last_mut().expect("expr before any alert");
            let expr = expr.trim();
            if expr == ">" || expr == "|" {
                let base = indent(lines[i]);
                while i + 1 < lines.len()
                    && indent(lines[i + 1]) > base
                    && !lines[i + 1].trim().is_empty()
                {
                    i += 1;
                    rule.expr += lines[i].trim();
                    rule.expr.push(' ');
                }
            } else {
                rule.expr = expr.to_string();
            }
        } else if let Some(rule) = rules.last_mut() {
            let mut rest = line;
            while let Some(at) = rest.find("$labels.") {
                rest = &rest[at + "$labels.".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rule.labels_used.insert(name);
            }
        }
        i += 1;
    }
    rules
}

/// The identifiers in `expr` that start with `prefix`.
fn names(expr: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find(prefix) {
        let boundary = at == 0
            || !rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len().max(1)..];
        if boundary {
            out.insert(name);
        }
    }
    out
}

/// The label names inside every `on(…)` and `by(…)` of `expr`.
fn matched_labels(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kw in ["on(", "by(", "on (", "by ("] {
        for part in expr.split(kw).skip(1) {
            let inside = part.split(')').next().unwrap();
            out.extend(
                inside
                    .split(',')
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty()),
            );
        }
    }
    out
}

#[test]
fn the_alert_rules_in_the_docs_name_served_metrics_and_labels() {
    let rules = rules();
    let alerts: Vec<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    assert_eq!(
        alerts,
        [
            "FleetProjectNoSuccess",
            "FleetNamespacePinnedAtCap",
            "FleetScheduleOverdue",
            "FleetQueueStale"
        ]
    );

    // A daemon with a declared namespace, a success, a failure, a queued run and a schedule
    // (once a year: it never fires here), so that every family has samples.
    let f = Fleet::new(&format!(
        "http_listen = \"127.0.0.1:0\"\n[namespaces.ops]\nmax_concurrency = 1\n\
         [projects.ok]\ncommand = {}\nnamespace = \"ops\"\n[projects.bad]\ncommand = {}\n\
         [projects.yearly]\ncommand = [\"true\"]\nschedule = \"0 0 1 1 *\"\n",
        sh("true"),
        sh("exit 1")
    ));
    let d = f.start_daemon();
    let addr = http_address(&d);
    let ok = f.enqueue("ok");
    let bad = f.enqueue("bad");
    f.wait_terminal(ok);
    f.wait_terminal(bad);
    let s = scrape(&addr);
    // Metric family → the label names its samples carry.
    let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for x in &s.samples {
        served
            .entry(x.metric.clone())
            .or_default()
            .extend(x.labels.keys().cloned());
    }
    // Prometheus adds the scrape target's `job` and `instance` to every series it stores: a
    // rule may (and, with several daemons scraped, must) match on them.
    for labels in served.values_mut() {
        labels.extend(["job".to_string(), "instance".to_string()]);
    }

    for rule in &rules {
        let metrics = names(&rule.expr, "fleet_");
        assert!(
            !metrics.is_empty(),
            "{}: names no fleet metric: {}",
            rule.alert,
            rule.expr
        );
        let mut wanted = matched_labels(&rule.expr);
        wanted.extend(rule.labels_used.iter().cloned());
        for m in &metrics {
            let labels = served.get(m).unwrap_or_else(|| {
                panic!(
                    "{}: {m} is not served by /metrics (served: {:?})",
                    rule.alert,
                    served.keys().collect::<Vec<_>>()
                )
            });
            for l in &wanted {
                assert!(
                    labels.contains(l),
                    "{}: {m} has no label {l} (it has {labels:?})",
                    rule.alert
                );
            }
        }
    }
}
