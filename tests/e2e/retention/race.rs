//! Two pruners at once: `fleet prune` by hand while the daemon's own prune step works off the
//! same backlog. Both finish clean, each reports only what it removed itself, and rows and
//! folders end equal.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::common::*;

/// Run ids with a row, any project.
fn rows(f: &Fleet) -> BTreeSet<i64> {
    let db = f.db_read_only();
    let mut stmt = db.prepare("SELECT id FROM runs").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Run ids that have files under runs/.
fn folders(f: &Fleet) -> BTreeSet<i64> {
    run_ids_on_disk(f)
}

/// `n` copies of the ended run `model` (row, and a log), all ended long ago.
fn backlog(f: &Fleet, model: i64, n: i64, first: i64) {
    let db = f.db();
    db.execute_batch(&format!(
        "CREATE TEMP TABLE model AS SELECT * FROM runs WHERE id = {model};
         UPDATE model SET started_at = 500, finished_at = 1000, occurrence = NULL;"
    ))
    .unwrap();
    let runs = f.state_dir().join("runs");
    for id in first..first + n {
        db.execute_batch(&format!(
            "UPDATE model SET id = {id}; INSERT INTO runs SELECT * FROM model;"
        ))
        .unwrap();
        std::fs::write(runs.join(format!("{id}.log")), "x\n").unwrap();
    }
}

/// Replaces the config and waits until the daemon has reloaded it.
fn reload(f: &Fleet, d: &Daemon<'_>, text: &str) {
    let reloads = || d.stderr().matches("reloaded ").count();
    let before = reloads();
    f.replace_config(text);
    f.wait_until(DEADLINE, "the daemon to reload", || reloads() > before);
}

/// Rounds of 400 ended runs, `keep_runs` lowered from "off" to 1 with a reload, and `fleet
/// prune` run again and again at once while the daemon's step prunes the same backlog.
#[test]
fn the_cli_and_the_daemon_prune_the_same_backlog_safely() {
    let off = "tick = \"100ms\"\nkeep_runs = \"off\"\n[projects.p]\ncommand = [\"true\"]\n";
    let one = "tick = \"100ms\"\nkeep_runs = 1\n[projects.p]\ncommand = [\"true\"]\n";
    let f = Fleet::new(off);
    let d = f.start_daemon();
    let first_run = f.enqueue("p");
    f.wait_terminal(first_run);
    let mut first = 1_000;
    for round in 0..3 {
        if round > 0 {
            reload(&f, &d, off);
        }
        // The model: the one run kept by the round before (the first run, at first).
        let model = *rows(&f).iter().max().unwrap();
        backlog(&f, model, 400, first);
        first += 1_000;
        let newest = *rows(&f).iter().max().unwrap();
        reload(&f, &d, one);
        let mut printed = BTreeSet::new();
        let start = Instant::now();
        // At once and again, for long enough to overlap the daemon's next step (30 ticks).
        while rows(&f).len() > 1 || start.elapsed() < std::time::Duration::from_secs(4) {
            assert!(
                start.elapsed() < DEADLINE,
                "round {round}: still {:?}",
                rows(&f).len()
            );
            let out = f.cmd(&["prune"]);
            assert_eq!(out.code(), Some(0), "round {round}: {}", out.stderr);
            for line in out.stdout.lines() {
                if let Some(rest) = line.strip_prefix("pruned run ") {
                    let id: i64 = rest.split(' ').next().unwrap().parse().unwrap();
                    assert!(printed.insert(id), "round {round}: run {id} reported twice");
                }
            }
        }
        let left = rows(&f);
        assert_eq!(left, BTreeSet::from([newest]), "round {round}");
        assert!(printed.is_disjoint(&left));
        assert_eq!(folders(&f), left, "round {round}: folders against rows");
        assert!(
            !d.stderr().contains("pruning ended runs failed"),
            "round {round}: {}",
            d.stderr()
        );
        eprintln!("round {round}: the CLI pruned {} runs", printed.len());
    }
    assert_check_ok(&f);
}

/// `fleet prune` dying midway (aborted after the second batch's folders went, before its rows)
/// has already printed the first batch, whose rows are forgotten.
#[test]
fn a_prune_killed_midway_has_printed_what_it_pruned() {
    let off = "tick = \"100ms\"\nkeep_runs = \"off\"\n[projects.p]\ncommand = [\"true\"]\n";
    let f = Fleet::new(off);
    let mut d = f.start_daemon();
    let model = f.enqueue("p");
    f.wait_terminal(model);
    d.kill();
    backlog(&f, model, 300, 1_000);
    f.replace_config("keep_runs = 1\n[projects.p]\ncommand = [\"true\"]\n");
    let mut prune = f.command();
    prune
        .arg("prune")
        .env("FAILPOINTS", "prune-after-files-removal=1*off->return");
    let out = run_with_deadline(prune, CMD_DEADLINE);
    assert_ne!(out.code(), Some(0), "the failpoint aborts the second batch");
    let printed: BTreeSet<i64> = out
        .stdout
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pruned run ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(printed.len(), 200, "the first batch: {}", out.stdout);
    assert!(printed.is_disjoint(&rows(&f)), "what it printed is gone");
}
