//! Three hosts, one database, 200 runs over two capped namespaces under a global cap, one host
//! capped lower: every run succeeds once, the caps hold fleet-wide, and all hosts take part.

use std::collections::BTreeSet;
use std::time::Duration;

use super::harness::*;
use super::markers::*;
use crate::common::*;

const RUNS: usize = 200;
const CAP_X: usize = 3;
const CAP_Y: usize = 5;
const CAP_GLOBAL: usize = 6;
const CAP_C: usize = 2;

#[test]
fn two_hundred_runs_over_three_hosts_keep_every_cap_fleet_wide() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b", "c"], |dir| {
        let cmd = sh(&marked(&markers_in(dir), "sleep 0.3"));
        two_namespaces(&cmd, CAP_GLOBAL, (CAP_X, 4), (CAP_Y, 7))
            + &format!("[hosts.c]\nmax_concurrency = {CAP_C}\n")
    }) else {
        return;
    };
    let _a = h.start("a");
    let _b = h.start("b");
    let _c = h.start("c");
    let projects: Vec<String> = (0..RUNS).map(|k| project_for(k, 4, 7)).collect();
    let ids = enqueue_from_all(&h, &projects);
    assert_eq!(ids.len(), RUNS);

    h.wait_until(Duration::from_secs(240), "all 200 runs to end", || {
        let runs = h.runs();
        runs.len() == RUNS && runs.iter().all(is_terminal)
    });
    let runs = h.runs();
    let mut hosts_of_runs = BTreeSet::new();
    for r in &runs {
        assert_eq!(status_of(r), "succeeded", "{r}");
        assert_eq!(r["attempt"], 1, "started once, never retried: {r}");
        hosts_of_runs.insert(host_of(r).to_string());
    }

    let markers = read_markers(&h.markers());
    assert_eq!(
        markers.len(),
        2 * RUNS,
        "one start and one end line per run"
    );
    let intervals = intervals(&markers).unwrap_or_else(|e| panic!("{e}"));
    let recorded: BTreeSet<i64> = intervals.iter().map(|i| i.run).collect();
    assert_eq!(recorded, ids.iter().copied().collect::<BTreeSet<_>>());
    let peaks = peaks(&intervals);
    eprintln!("peaks {peaks:?}");
    let limits = Limits {
        global: CAP_GLOBAL,
        namespaces: &[("x", CAP_X), ("y", CAP_Y)],
        hosts: &[("c", CAP_C)],
    };
    if let Err(e) = peaks.check(&limits) {
        panic!("{e}");
    }
    // Every host took part, and the global cap bound (or the test could not see it exceeded).
    let per_host: Vec<(&String, usize)> = peaks
        .runs_by_host
        .iter()
        .map(|(h, r)| (h, r.len()))
        .collect();
    eprintln!("runs per host {per_host:?}");
    assert_eq!(
        peaks
            .runs_by_host
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["a", "b", "c"],
        "runs did not spread over all three hosts: {per_host:?}"
    );
    assert_eq!(peaks.global, CAP_GLOBAL, "{peaks:?}");
    // fleet says each run ran where its command says it ran.
    for r in &runs {
        let i = intervals.iter().find(|i| i.run == id_of(r)).unwrap();
        assert_eq!(
            host_of(r),
            i.host,
            "run {} per fleet vs per its command",
            i.run
        );
    }
    assert_eq!(
        hosts_of_runs.into_iter().collect::<Vec<_>>(),
        ["a", "b", "c"],
        "`fleet runs --json` host fields"
    );
    h.assert_check_ok("a");
}
