//! Pruning at the store: which ended runs a policy lets go, forgetting them with their events
//! (both backends), and a new SQLite database giving freed pages back.

use std::collections::BTreeMap;
use std::time::Duration;

use store::*;

use crate::common;
use crate::common::Db;

both_backends!(
    keep_newest_keeps_that_many_and_never_touches_queued_runs,
    keep_by_age_spares_the_newest_and_per_project_rules_win,
    a_run_a_queued_run_refers_to_is_kept_until_that_run_ends,
    keep_runs_counts_runs_that_started_and_skips_apart,
    a_host_prunes_only_the_runs_it_ran_and_runs_that_never_started,
);

/// Marks every run as having started (at 500), as if it had run before it ended.
fn started(db: &Db) {
    db.exec(
        "UPDATE runs SET started_at = 500",
        "UPDATE runs SET started_at = 500",
    );
}

fn a_run_a_queued_run_refers_to_is_kept_until_that_run_ends(db: &Db) {
    let (s, _) = common::open(db);
    let old = ended(&s, "a", 5, 1_000);
    started(db);
    let hook = s
        .enqueue(
            &NewRun {
                hook_of: Some(old[0]),
                ..new_run("h")
            },
            1_000,
        )
        .unwrap();
    s.enqueue(
        &NewRun {
            rerun_of: Some(old[1]),
            ..new_run("b")
        },
        1_000,
    )
    .unwrap();
    let retry = s.enqueue(&new_run("c"), 1_000).unwrap();
    let sql = format!("UPDATE runs SET retry_of = {} WHERE id = {retry}", old[2]);
    db.exec(&sql, &sql);
    let keep1 = Keep {
        newest: Some(1),
        finished_after: None,
    };
    assert_eq!(
        ids(&s.prune_candidates(&policy(keep1, 10_000), 100).unwrap()),
        vec![old[3]],
        "the failed run of a queued hook, a queued retry's attempt and a queued rerun's run stay"
    );
    // Once the referring run has ended, the run it referred to goes by the rules again.
    s.request_cancel(hook, "test", 2_000).unwrap();
    assert_eq!(
        ids(&s.prune_candidates(&policy(keep1, 10_000), 100).unwrap()),
        vec![old[0], old[3]]
    );
}

fn keep_runs_counts_runs_that_started_and_skips_apart(db: &Db) {
    let (s, _) = common::open(db);
    let ran = ended(&s, "a", 2, 1_000);
    started(db);
    // Skipped occurrences: ended (cancelled) without ever starting, after the real runs.
    let skips = ended(&s, "a", 3, 1_000);
    let keep2 = Keep {
        newest: Some(2),
        finished_after: None,
    };
    assert_eq!(
        ids(&s.prune_candidates(&policy(keep2, 10_000), 100).unwrap()),
        vec![skips[0]],
        "skips never push the runs that ran out of history: {ran:?} stay"
    );
}

fn new_run(project: &str) -> NewRun {
    NewRun {
        project: project.into(),
        namespace: "default".into(),
        trigger: Trigger::Manual,
        ..Default::default()
    }
}

/// `n` runs of `project`, each ended (cancelled while queued) at `at`.
fn ended(s: &Store, project: &str, n: usize, at: Millis) -> Vec<RunId> {
    (0..n)
        .map(|_| {
            let id = s.enqueue(&new_run(project), at).unwrap();
            s.request_cancel(id, "test", at).unwrap();
            id
        })
        .collect()
}

fn policy(default: Keep, ended_before: Millis) -> PrunePolicy {
    PrunePolicy {
        default,
        projects: BTreeMap::new(),
        ended_before,
        host: None,
    }
}

/// On a shared database each run's files are on the host that ran it: host `a`'s prune must
/// never select `b`'s runs (their folders would stay on b's disk with no row), but it does
/// select runs no host ever ran.
fn a_host_prunes_only_the_runs_it_ran_and_runs_that_never_started(db: &Db) {
    let (s, _) = common::open(db);
    let on_a = ended(&s, "p", 3, 1_000);
    let on_b = ended(&s, "p", 3, 1_000);
    started(db);
    let set_host = |ids: &[RunId], host: &str| {
        let sql = format!(
            "UPDATE runs SET host = '{host}' WHERE id IN ({})",
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        db.exec(&sql, &sql);
    };
    set_host(&on_a, "a");
    set_host(&on_b, "b");
    let never = ended(&s, "p", 2, 1_000);
    let keep1 = Keep {
        newest: Some(1),
        finished_after: None,
    };
    let mut for_a = policy(keep1, 10_000);
    for_a.host = Some("a".into());
    let got = ids(&s.prune_candidates(&for_a, 100).unwrap());
    assert_eq!(
        got,
        vec![on_a[0], on_a[1], on_a[2], never[0]],
        "a's started runs (the project's newest, b's, stays) and a never-started run, never b's"
    );
    let mut for_b = policy(keep1, 10_000);
    for_b.host = Some("b".into());
    assert_eq!(
        ids(&s.prune_candidates(&for_b, 100).unwrap()),
        vec![on_b[0], on_b[1], never[0]],
        "b's own runs, never a's; b's newest is the project's newest started run"
    );
    // Without a host (one host, SQLite): every run, whoever ran it.
    assert_eq!(
        ids(&s.prune_candidates(&policy(keep1, 10_000), 100).unwrap()).len(),
        6
    );
}

fn ids(c: &[PruneCandidate]) -> Vec<RunId> {
    c.iter().map(|c| c.id).collect()
}

fn keep_newest_keeps_that_many_and_never_touches_queued_runs(db: &Db) {
    let (s, _) = common::open(db);
    let old = ended(&s, "a", 5, 1_000);
    let queued = s.enqueue(&new_run("a"), 1_000).unwrap();
    let keep2 = Keep {
        newest: Some(2),
        finished_after: None,
    };
    let c = s.prune_candidates(&policy(keep2, 10_000), 100).unwrap();
    assert_eq!(ids(&c), old[..3].to_vec());
    // The grace: nothing that ended at or after `ended_before`.
    assert!(s
        .prune_candidates(&policy(keep2, 1_000), 100)
        .unwrap()
        .is_empty());
    // The limit.
    assert_eq!(
        s.prune_candidates(&policy(keep2, 10_000), 2).unwrap().len(),
        2
    );
    // No limit (what `fleet prune` asks for): usize::MAX, on either backend.
    assert_eq!(
        ids(&s
            .prune_candidates(&policy(keep2, 10_000), usize::MAX)
            .unwrap()),
        old[..3].to_vec()
    );
    assert_eq!(s.forget_runs(&ids(&c)).unwrap(), 3);
    assert!(s.get_run(old[0]).is_err());
    assert!(s.get_run(old[4]).is_ok());
    assert_eq!(s.get_run(queued).unwrap().status, RunStatus::Queued);
    assert!(
        s.events_after(0)
            .unwrap()
            .iter()
            .all(|e| e.run_id >= old[3]),
        "the forgotten runs' events went with them"
    );
    // A queued run is never forgotten, even when asked.
    assert_eq!(s.forget_runs(&[queued]).unwrap(), 0);
}

fn keep_by_age_spares_the_newest_and_per_project_rules_win(db: &Db) {
    let (s, _) = common::open(db);
    let a = ended(&s, "a", 3, 1_000);
    let b = ended(&s, "b", 3, 1_000);
    started(db);
    let by_age = Keep {
        newest: None,
        finished_after: Some(5_000),
    };
    let mut p = policy(by_age, 10_000);
    // Everything is older than the limit: all but each project's newest.
    assert_eq!(
        ids(&s.prune_candidates(&p, 100).unwrap()),
        vec![a[0], a[1], b[0], b[1]]
    );
    p.projects.insert("b".into(), Keep::default());
    assert_eq!(ids(&s.prune_candidates(&p, 100).unwrap()), vec![a[0], a[1]]);
    p.default.finished_after = Some(500);
    assert!(s.prune_candidates(&p, 100).unwrap().is_empty());
}

#[test]
fn a_new_database_gives_pruned_pages_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("fleet.db"), Duration::from_millis(200)).unwrap();
    assert!(
        !s.enable_incremental_vacuum().unwrap(),
        "a new database is created with incremental vacuum"
    );
    let db = dir.path().join("fleet.db");
    let size = || {
        let len = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        len(&db) + len(&dir.path().join("fleet.db-wal"))
    };
    // Enough history that the empty schema's own pages (one or two per table and index) are
    // small beside it.
    let all = ended(&s, "a", 2000, 1_000);
    s.reclaim_space(u32::MAX).unwrap();
    let full = size();
    let keep = Keep {
        newest: Some(1),
        finished_after: None,
    };
    loop {
        let c = s.prune_candidates(&policy(keep, 10_000), 500).unwrap();
        if c.is_empty() {
            break;
        }
        s.forget_runs(&ids(&c)).unwrap();
    }
    s.reclaim_space(u32::MAX).unwrap();
    assert!(s.get_run(all[1999]).is_ok());
    let after = size();
    assert!(
        after * 3 < full,
        "{after} bytes after pruning, {full} before"
    );
    let _ = Duration::ZERO;
}
