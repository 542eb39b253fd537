//! Pruning on a shared database: each host prunes only the runs it ran (their files are on its
//! disk), never another host's. With `keep_runs = 1`, runs on host a then on host b, a prune
//! on a removes a's runs, rows and files together, and leaves b's rows, whose files b still
//! has; then b prunes its own. `fleet check` passes on both hosts throughout, and each host's
//! run files are exactly its runs' rows.

use std::collections::BTreeSet;

use super::harness::*;
use crate::common::*;

/// The runs with files on `host`'s disk.
fn folders(h: &Hosts, host: &str) -> BTreeSet<i64> {
    run_ids_on_disk(h.fleet(host))
}

/// The ids of the rows of the runs `host` ran.
fn rows_of(h: &Hosts, host: &str) -> BTreeSet<i64> {
    h.runs()
        .iter()
        .filter(|r| host_of(r) == host)
        .map(id_of)
        .collect()
}

/// Three runs of `p` enqueued on and run by `host` alone, waited to their ends.
fn three_runs_on(h: &Hosts, host: &str) -> Vec<i64> {
    let _daemon = h.start(host);
    let ids: Vec<i64> = (0..3).map(|_| h.fleet(host).enqueue("p")).collect();
    for &id in &ids {
        let run = h.fleet(host).wait_terminal(id);
        assert_eq!(status_of(&run), "succeeded", "run {id}: {run}");
        assert_eq!(host_of(&run), host, "run {id}: {run}");
    }
    ids
}

#[test]
fn a_host_prunes_its_own_runs_and_never_another_hosts() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |_| {
        "keep_runs = 1\n[projects.p]\ncommand = [\"true\"]\n".to_string()
    }) else {
        return;
    };
    let on_a = three_runs_on(&h, "a");
    let on_b = three_runs_on(&h, "b");
    assert_eq!(folders(&h, "a"), on_a.iter().copied().collect());
    assert_eq!(folders(&h, "b"), on_b.iter().copied().collect());

    // Runs that ended within the grace are never let go: wait until b's last but one (the
    // newest that b may prune) is past it.
    let second = format!("would prune run {} ", on_b[1]);
    h.wait_until(DEADLINE, "b's runs to be past the prune grace", || {
        h.fleet("b")
            .cmd_ok(&["prune", "--dry-run"])
            .contains(&second)
    });
    let dry = h.fleet("a").cmd_ok(&["prune", "--dry-run"]);
    for id in &on_b {
        assert!(
            !dry.contains(&format!("run {id} ")),
            "host a would prune b's run {id}:\n{dry}"
        );
    }
    assert!(
        dry.contains("host a:"),
        "says it prunes this host's runs:\n{dry}"
    );

    // A prune on a: a's folders and rows go (a shim still ending keeps its run for a later
    // prune: prune again until they are gone); b's rows all stay.
    h.wait_until(DEADLINE, "a's runs pruned on a", || {
        h.fleet("a").cmd_ok(&["prune"]);
        folders(&h, "a").is_empty() && rows_of(&h, "a").is_empty()
    });
    assert_eq!(
        rows_of(&h, "b"),
        on_b.iter().copied().collect(),
        "a prune on host a removed rows of host b's runs\n{}",
        h.diagnostics()
    );
    assert_eq!(folders(&h, "b"), rows_of(&h, "b"));
    h.assert_check_ok("a");
    h.assert_check_ok("b");

    // b prunes its own, keeping the project's newest.
    h.wait_until(DEADLINE, "b's older runs pruned on b", || {
        h.fleet("b").cmd_ok(&["prune"]);
        rows_of(&h, "b") == BTreeSet::from([on_b[2]])
    });
    assert_eq!(folders(&h, "b"), BTreeSet::from([on_b[2]]));
    h.assert_check_ok("a");
    h.assert_check_ok("b");
}
