//! `keep_runs`, `keep_for` and `fleet prune`: ended runs are forgotten with their folders, in
//! small batches by the daemon or all at once by hand, never a queued or active run nor a
//! project's newest; a crash inside pruning leaves nothing `fleet check` objects to, and the
//! next prune finishes the work.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::*;

/// Run ids with a row in the database, by project.
fn rows(f: &Fleet, project: &str) -> BTreeSet<i64> {
    let db = f.db_read_only();
    let mut stmt = db
        .prepare("SELECT id FROM runs WHERE project = ?1")
        .unwrap();
    stmt.query_map([project], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Run ids with events but no row: what a prune must never leave.
fn orphan_events(f: &Fleet) -> i64 {
    f.db_read_only()
        .query_row(
            "SELECT COUNT(*) FROM events WHERE run_id NOT IN (SELECT id FROM runs)",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// Run ids that have files under runs/.
fn folders(f: &Fleet) -> BTreeSet<i64> {
    run_ids_on_disk(f)
}

/// Bytes of the database file, and of its write-ahead log.
fn db_bytes(f: &Fleet) -> (u64, u64) {
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let dir = f.state_dir();
    (len(&dir.join("fleet.db")), len(&dir.join("fleet.db-wal")))
}

/// SQLite checkpoints its write-ahead log once it passes 1,000 pages (4 MiB): past that, the
/// log would be growing without bound.
const WAL_BOUND: u64 = 4 * 1024 * 1024 + 512 * 1024;

/// Enqueues `n` runs of `project` and waits until every run of it has ended.
fn run_batch(f: &Fleet, project: &str, n: usize) -> Vec<i64> {
    let ids: Vec<i64> = (0..n).map(|_| f.enqueue(project)).collect();
    // A run may be pruned as soon as it ended: gone counts as ended.
    f.wait_until(DEADLINE, "the runs to end (or be pruned)", || {
        let runs = f.runs();
        ids.iter().all(|id| {
            runs.iter()
                .find(|r| r["id"].as_i64() == Some(*id))
                .is_none_or(is_terminal)
        })
    });
    ids
}

/// A schedule every second plus hundreds of enqueued runs, `keep_runs = 20`: rows and folders
/// stay bounded, the database file stops growing, `fleet check` stays clean throughout.
#[test]
fn keep_runs_bounds_rows_folders_and_the_database() {
    let f = Fleet::new(
        "tick = \"100ms\"\nkeep_runs = 20\nkeep_for = \"off\"\n\
         [projects.beat]\ncommand = [\"true\"]\nschedule = \"* * * * * *\"\n\
         [projects.bulk]\ncommand = [\"true\"]\n",
    );
    let mut d = f.start_daemon();
    let mut sizes = Vec::new();
    let mut made = 0;
    for round in 0..6 {
        made += run_batch(&f, "bulk", 60).len();
        // Every prune step (every 30 ticks) works the backlog off: wait until it has.
        f.wait_until(DEADLINE, "bulk's history to shrink to keep_runs", || {
            rows(&f, "bulk").len() <= 20
        });
        assert_check_ok(&f);
        assert_eq!(orphan_events(&f), 0, "events outlived their runs");
        let (db, wal) = db_bytes(&f);
        eprintln!("round {round}: {made} bulk runs made, database {db} bytes, log {wal} bytes");
        assert!(
            wal <= WAL_BOUND,
            "round {round}: the write-ahead log is {wal} bytes"
        );
        sizes.push(db);
    }
    let beat = rows(&f, "beat");
    assert!(beat.len() >= 10, "the schedule fired: {beat:?}");
    // A run that ended in the last few seconds waits for the next prune: beat keeps at most
    // keep_runs, plus the few that ended since the last step, plus its active one.
    f.wait_until(DEADLINE, "beat's history to stay near keep_runs", || {
        rows(&f, "beat").len() <= 20 + 8
    });
    let bulk = rows(&f, "bulk");
    assert!(bulk.len() <= 20, "{bulk:?}");
    // Stopped, the state holds still: every row kept has its folder, and no folder outlived
    // its row.
    d.kill();
    let kept: BTreeSet<i64> = rows(&f, "beat").union(&rows(&f, "bulk")).copied().collect();
    assert_eq!(folders(&f), kept, "run folders against rows");
    // The newest bulk run is always kept: its last outcome stays known.
    assert!(bulk.iter().max().copied() >= Some(made as i64 / 2));
    // The database stops growing: the last rounds are no larger than the second.
    let settled = sizes[1];
    for (round, size) in sizes.iter().enumerate().skip(2) {
        assert!(
            *size <= settled + 64 * 1024,
            "round {round}: the database grew to {size} bytes from {settled}: {sizes:?}"
        );
    }
    assert_check_ok(&f);
}

/// The daemon crashes inside pruning — after the folders of a batch went, before their rows:
/// `fleet check` is clean on what it left, and the next daemon finishes the prune.
#[test]
fn a_crash_inside_pruning_recovers_cleanly() {
    let f = Fleet::new(
        "tick = \"100ms\"\nkeep_runs = 3\n[projects.p]\ncommand = [\"sh\", \"-c\", \"echo hi\"]\n",
    );
    // A daemon without the failpoint makes the history; the second prunes and crashes.
    {
        let mut d = f.start_daemon();
        let ids = run_batch(&f, "p", 12);
        assert_eq!(rows(&f, "p").len(), 12, "nothing pruned before the grace");
        assert_eq!(ids.len(), 12);
        d.kill();
    }
    let mut crashing = f.spawn_daemon(&[("FAILPOINTS", "prune-after-files-removal=return")]);
    f.wait_until(DEADLINE, "the daemon to abort inside pruning", || {
        crashing.try_exit().is_some()
    });
    let status = crashing.exited().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "{}",
        crashing.stderr()
    );
    let left = rows(&f, "p");
    let dirs = folders(&f);
    assert_eq!(
        left.len(),
        12,
        "the crash came before the rows were forgotten"
    );
    let without_folder: Vec<i64> = left.difference(&dirs).copied().collect();
    assert_eq!(
        without_folder.len(),
        9,
        "the batch folders went first: {dirs:?} {left:?}\n{}",
        crashing.stderr()
    );
    assert_check_ok(&f);
    assert_eq!(
        f.cmd_ok(&["logs", &without_folder[0].to_string()]),
        "",
        "a run whose folder went shows an empty log"
    );

    let _d = f.start_daemon();
    f.wait_until(DEADLINE, "the next daemon to finish the prune", || {
        rows(&f, "p").len() == 3
    });
    let kept = rows(&f, "p");
    assert_eq!(
        folders(&f),
        kept,
        "every kept run has its folder, no other folder is left"
    );
    assert_eq!(orphan_events(&f), 0);
    assert_check_ok(&f);
    assert_eq!(f.logs(*kept.iter().max().unwrap()), "hi\n");
}

/// `fleet prune --dry-run` with the test clock (`offset_file`), as the daemon sees it.
fn dry_run(f: &Fleet, clock: &[(&str, &str)]) -> String {
    let mut dry = f.command();
    dry.args(["prune", "--dry-run"]).envs(clock.iter().copied());
    let out = run_with_deadline(dry, CMD_DEADLINE);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    out.stdout
}

/// Sets the test clock's offset (written whole by a rename: no reader sees half a number).
fn set_offset(f: &Fleet, file: &Path, ms: i64) {
    let tmp = f.file("clock-offset.tmp");
    std::fs::write(&tmp, ms.to_string()).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

/// `keep_for` on an injected clock: runs that ended less than `keep_for` ago are kept; two
/// hours later every run but the project's newest (its last outcome) is pruned, by the daemon
/// on its own; `--dry-run` lists without removing. (The clock is the daemon's and the CLI's:
/// the shims stamp a run's end with the real clock, so every run here ended "now" for real.)
#[test]
fn keep_for_prunes_by_age_on_the_injected_clock() {
    let f = Fleet::new(
        "tick = \"100ms\"\nkeep_runs = \"off\"\nkeep_for = \"1h\"\n\
         [projects.p]\ncommand = [\"true\"]\n",
    );
    let offset = f.file("clock-offset");
    set_offset(&f, &offset, 0);
    let clock = [("FLEET_TEST_CLOCK_OFFSET_FILE", offset.to_str().unwrap())];
    let mut d = f.start_daemon_env(&clock);
    let ids = run_batch(&f, "p", 5);
    d.kill();
    // Past the prune grace, still well within keep_for: nothing to prune.
    set_offset(&f, &offset, 60_000);
    assert!(dry_run(&f, &clock).contains("would prune 0 runs"));

    set_offset(&f, &offset, 2 * 3_600_000);
    let listed = dry_run(&f, &clock);
    assert!(listed.contains("would prune 4 runs"), "{listed}");
    assert_eq!(rows(&f, "p").len(), 5, "a dry run removes nothing");

    let newest = *ids.iter().max().unwrap();
    let _d = f.start_daemon_env(&clock);
    f.wait_until(DEADLINE, "the daemon to prune the old runs", || {
        rows(&f, "p") == BTreeSet::from([newest])
    });
    assert_eq!(folders(&f), BTreeSet::from([newest]));
    assert_check_ok(&f);
}
