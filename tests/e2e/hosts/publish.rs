//! One config for the fleet: with runs active on all three hosts, host a publishes a config
//! whose namespace cap is lower than the runs active in it. From the publish on, no run of the
//! namespace starts anywhere until the namespace is under the new cap fleet-wide, even before
//! the other hosts have applied the new version.

use std::time::Duration;

use super::harness::*;
use super::markers::*;
use crate::common::*;

const OLD_CAP: usize = 6;
const NEW_CAP: usize = 2;
const PER_HOST: usize = 2;
const RUNS: usize = 12;

/// The published config's version, read from the database (0 when nothing is published).
fn published_version(h: &Hosts) -> i64 {
    h.sql()
        .query_opt("SELECT version FROM published_config", &[])
        .unwrap_or_else(|e| panic!("read published_config: {e}"))
        .map_or(0, |r| r.get(0))
}

#[test]
fn a_lower_namespace_cap_published_mid_flight_holds_on_every_host() {
    use_private_bin();
    let body = |cap: usize| {
        move |dir: &std::path::Path| {
            let cmd = sh(&marked(&markers_in(dir), &gated(dir)));
            let mut t = format!("max_concurrency = 12\n[namespaces.n]\nmax_concurrency = {cap}\n");
            for host in ["a", "b", "c"] {
                t += &format!("[hosts.{host}]\nmax_concurrency = {PER_HOST}\n");
            }
            for i in 0..RUNS {
                t += &format!("[projects.n{i}]\nnamespace = \"n\"\ncommand = {cmd}\n");
            }
            t
        }
    };
    let Some(h) = Hosts::new(&["a", "b", "c"], body(OLD_CAP)) else {
        return;
    };
    let shared = h.shared().to_path_buf();
    let _a = h.start("a");
    let _b = h.start("b");
    let _c = h.start("c");
    let projects: Vec<String> = (0..RUNS).map(|i| format!("n{i}")).collect();
    enqueue_from_all(&h, &projects);
    h.wait_until(DEADLINE, "six runs running, two per host", || {
        let running: Vec<_> = h
            .runs()
            .into_iter()
            .filter(|r| status_of(r) == "running")
            .collect();
        running.len() == OLD_CAP
            && ["a", "b", "c"]
                .iter()
                .all(|n| running.iter().filter(|r| host_of(r) == *n).count() == PER_HOST)
            && read_markers(&h.markers()).len() == OLD_CAP
    });

    // Host a's operator lowers the cap and reloads: the new text is published.
    let before = published_version(&h);
    let old_text = std::fs::read_to_string(&h.fleet("a").config).unwrap();
    let new_text = old_text.replace(
        &format!("[namespaces.n]\nmax_concurrency = {OLD_CAP}\n"),
        &format!("[namespaces.n]\nmax_concurrency = {NEW_CAP}\n"),
    );
    assert_ne!(old_text, new_text);
    h.fleet("a").replace_config(&new_text);
    h.fleet("a").cmd_ok(&["reload"]);
    h.wait_until(DEADLINE, "the new config to be published", || {
        published_version(&h) > before
    });
    let published_at = now_ns();
    let version = published_version(&h);
    eprintln!("published version {version} (was {before})");

    // The active runs end one at a time: 5, 4, 3, 2 still active (no start allowed), then 1.
    let active: Vec<i64> = h
        .runs()
        .into_iter()
        .filter(|r| status_of(r) == "running")
        .map(|r| id_of(&r))
        .collect();
    for id in &active[..OLD_CAP - 1] {
        release(&shared, *id);
        h.fleet("a").wait_terminal(*id);
    }
    release_all(&shared);
    h.wait_until(Duration::from_secs(120), "every run to end", || {
        let runs = h.runs();
        runs.len() == RUNS && runs.iter().all(is_terminal)
    });
    for r in h.runs() {
        assert_eq!(status_of(&r), "succeeded", "{r}");
    }
    let all = intervals(&read_markers(&h.markers())).unwrap_or_else(|e| panic!("{e}"));
    let over = starts_over_cap(&all, "n", NEW_CAP, published_at);
    assert!(
        over.is_empty(),
        "starts past the published cap {NEW_CAP}:\n{}\n{}",
        over.join("\n"),
        h.diagnostics()
    );
    // The check could fail: runs did start after the publish, once the namespace was under
    // the new cap.
    let late = all.iter().filter(|i| i.from > published_at).count();
    assert_eq!(late, RUNS - OLD_CAP, "runs started after the publish");
    let peaks = peaks(&all);
    if let Err(e) = peaks.check(&Limits {
        global: 12,
        namespaces: &[("n", OLD_CAP)],
        hosts: &[("a", PER_HOST), ("b", PER_HOST), ("c", PER_HOST)],
    }) {
        panic!("{e}");
    }
    // Every host applied the published version (it says so in its heartbeat).
    h.wait_until(DEADLINE, "every host on the published version", || {
        h.hosts_json("a")
            .iter()
            .all(|r| r["config_version"].as_i64() == Some(version))
    });
    eprintln!("fleet hosts --json: {:?}", h.hosts_json("b"));

    h.assert_check_ok("a");
}
