//! "Double spawn after restart", at packer level.
//!
//! After a restart the daemon's slot pool is empty while the database still records a run in flight.
//! A packer that counted only the slot pool saw free capacity and started that project again. These
//! tests build the running set the way the daemon must, `merge(&slot_pool, &db_running_set)`, and
//! check that neither packer picks the in-flight project and both count it against the caps. If
//! `merge` dropped the DB side (or a packer ignored the running set) they fail.

use std::collections::BTreeMap;

use packer::{
    merge, packer_for, ActiveRun, Candidate, Caps, FallbackPacker, NamespaceCap, NamespacePacker,
    Packer, RunningSet,
};

fn cand(run_id: i64, project: &str, namespace: &str, priority: i64) -> Candidate {
    Candidate {
        run_id,
        project: project.into(),
        namespace: namespace.into(),
        priority,
    }
}

fn active(run_id: i64, project: &str, namespace: &str) -> ActiveRun {
    ActiveRun {
        run_id,
        project: project.into(),
        namespace: namespace.into(),
        host: None,
    }
}

/// The running set right after a restart: nothing in the slot pool, project "P" in flight in the DB.
fn running_after_restart() -> RunningSet {
    let slot_pool = RunningSet::new();
    let db_running_set: RunningSet = [active(1, "P", "ops")].into_iter().collect();
    merge(&slot_pool, &db_running_set)
}

fn projects(picks: &[Candidate]) -> Vec<&str> {
    picks.iter().map(|c| c.project.as_str()).collect()
}

#[test]
fn empty_slot_pool_with_db_running_project_is_not_picked_fallback() {
    // Zero namespaces declared: the configuration under which the original bug happened.
    let caps = Caps {
        max_parallel: BTreeMap::new(),
        host: Default::default(),
        global: 2,
        namespaces: BTreeMap::new(),
    };
    // P's new run is the most urgent one in the queue, so only the running set can hold it back.
    let queue = vec![
        cand(10, "P", "ops", 9),
        cand(11, "Q", "default", 0),
        cand(12, "R", "default", 0),
    ];
    let running = running_after_restart();

    for picks in [
        FallbackPacker.pack(&caps, &running, &queue),
        packer_for(&caps).pack(&caps, &running, &queue),
    ] {
        assert!(
            !projects(&picks).contains(&"P"),
            "picked P although the DB records it in flight: {picks:?}"
        );
        // Global cap 2, P holds one slot: exactly one start.
        assert_eq!(projects(&picks), vec!["Q"]);
    }
}

fn ops_and_dev(global: usize, ops_cap: usize) -> Caps {
    let ns = |max_concurrency| NamespaceCap {
        max_concurrency,
        weight: 1,
    };
    Caps {
        max_parallel: BTreeMap::new(),
        host: Default::default(),
        global,
        namespaces: BTreeMap::from([("ops".into(), ns(ops_cap)), ("dev".into(), ns(5))]),
    }
}

#[test]
fn empty_slot_pool_with_db_running_project_is_not_picked_namespace() {
    // P's new run is the most urgent one in the queue, so only the running set can hold it back.
    let queue = vec![
        cand(10, "P", "ops", 9),
        cand(11, "Q", "ops", 8),
        cand(12, "R", "dev", 0),
        cand(13, "S", "dev", 0),
        cand(14, "T", "dev", 0),
    ];
    let running = running_after_restart();

    // "ops" has cap 1 and P fills it: nothing from ops. Global cap 3, P holds one slot: exactly
    // two starts, both from dev.
    let caps = ops_and_dev(3, 1);
    for picks in [
        NamespacePacker.pack(&caps, &running, &queue),
        packer_for(&caps).pack(&caps, &running, &queue),
    ] {
        assert!(
            !projects(&picks).contains(&"P"),
            "picked P although the DB records it in flight: {picks:?}"
        );
        assert!(
            picks.iter().all(|c| c.namespace != "ops"),
            "ops is full (P is running there) but got {picks:?}"
        );
        assert_eq!(projects(&picks), vec!["R", "S"]);
    }

    // "ops" has room for one more, so its cap alone cannot hold P back: the running set must.
    // Global cap 2, P holds one slot: exactly one start, and it is Q.
    let caps = ops_and_dev(2, 2);
    let queue = vec![cand(10, "P", "ops", 9), cand(11, "Q", "ops", 8)];
    for picks in [
        NamespacePacker.pack(&caps, &running, &queue),
        packer_for(&caps).pack(&caps, &running, &queue),
    ] {
        assert_eq!(projects(&picks), vec!["Q"]);
    }
}

/// The merge keeps every run either side holds: a run of the pool whose row no longer says
/// active (another program wrote over it while its command runs) still counts, and so does a
/// run only the database records; a run both hold counts once, where the pool started it.
#[test]
fn merge_keeps_every_run_of_either_side() {
    let live: RunningSet = [active(1, "P", "a"), active(3, "L", "a")]
        .into_iter()
        .collect();
    let persisted: RunningSet = [
        active(2, "P", "b"),
        active(4, "D", "b"),
        active(3, "L", "b"),
    ]
    .into_iter()
    .collect();

    let merged = merge(&live, &persisted);

    assert_eq!(
        merged.runs_of("P"),
        &[active(1, "P", "a"), active(2, "P", "b")]
    );
    assert_eq!(merged.get("L"), Some(&active(3, "L", "a")));
    assert_eq!(merged.get("D"), Some(&active(4, "D", "b")));
    assert_eq!(merged.len(), 4);
    assert_eq!(merged.count_in("a"), 2);
    assert_eq!(merged.count_in("b"), 2);
}

#[test]
fn merge_is_the_union() {
    let live: RunningSet = [active(1, "A", "x")].into_iter().collect();
    let empty = RunningSet::new();
    assert_eq!(merge(&live, &empty), live);
    assert_eq!(merge(&empty, &live), live);
    assert!(merge(&empty, &empty).is_empty());
    assert!(!merge(&empty, &live).is_empty());
}

/// The pool is not empty, but it misses a run the database records (recovery could not settle
/// it, so no slot holds it): the merge must still count it, in the namespace the database says,
/// under both packers.
#[test]
fn a_db_only_run_beside_a_non_empty_pool_still_counts() {
    let pool: RunningSet = [active(2, "L", "dev")].into_iter().collect();
    let db: RunningSet = [active(1, "P", "ops"), active(2, "L", "dev")]
        .into_iter()
        .collect();
    let running = merge(&pool, &db);
    assert_eq!(running.len(), 2);

    // Namespaces: ops (cap 1) is full by P alone; global 3 leaves one seat, for dev.
    let caps = ops_and_dev(3, 1);
    let queue = vec![
        cand(10, "P", "ops", 9),
        cand(11, "Q", "ops", 9),
        cand(12, "R", "dev", 0),
        cand(13, "S", "dev", 0),
    ];
    let picks = packer_for(&caps).pack(&caps, &running, &queue);
    assert_eq!(projects(&picks), vec!["R"], "{picks:?}");

    // No namespaces: global 3, two seats taken (one by the DB-only run): one start.
    let caps = Caps {
        max_parallel: BTreeMap::new(),
        host: Default::default(),
        global: 3,
        namespaces: BTreeMap::new(),
    };
    let picks = packer_for(&caps).pack(&caps, &running, &queue);
    assert_eq!(projects(&picks), vec!["Q"], "{picks:?}");
}

mod any_restart {
    //! Property: for any caps (namespaces declared or none), any slot pool and any DB running
    //! set, the packer picked for the caps, handed the merge, never picks a project the pool or
    //! the database holds, and no cap is exceeded once the database's runs are counted where
    //! the database says they run.

    use super::*;
    use proptest::prelude::*;

    const NAMESPACES: [&str; 3] = ["ops", "dev", "default"];

    fn runs(ids: std::ops::Range<i64>) -> impl Strategy<Value = RunningSet> {
        prop::collection::vec(
            (ids, 0usize..6, prop::sample::select(&NAMESPACES[..])),
            0..5,
        )
        .prop_map(|v| {
            v.into_iter()
                .map(|(id, p, ns)| active(id, &format!("p{p}"), ns))
                .collect()
        })
    }

    fn caps() -> impl Strategy<Value = Caps> {
        (0usize..6, prop::option::of((0usize..4, 0usize..4))).prop_map(|(global, ns)| Caps {
            max_parallel: BTreeMap::new(),
            host: Default::default(),
            global,
            namespaces: ns
                .map(|(ops, dev)| {
                    BTreeMap::from([
                        (
                            "ops".to_string(),
                            NamespaceCap {
                                max_concurrency: ops,
                                weight: 1,
                            },
                        ),
                        (
                            "dev".to_string(),
                            NamespaceCap {
                                max_concurrency: dev,
                                weight: 2,
                            },
                        ),
                    ])
                })
                .unwrap_or_default(),
        })
    }

    fn queue() -> impl Strategy<Value = Vec<Candidate>> {
        prop::collection::vec(
            (
                1i64..50,
                0usize..6,
                prop::sample::select(&NAMESPACES[..]),
                0i64..3,
            ),
            0..12,
        )
        .prop_map(|v| {
            v.into_iter()
                .map(|(id, p, ns, prio)| cand(id, &format!("p{p}"), ns, prio))
                .collect()
        })
    }

    proptest! {
        #[test]
        fn the_merge_is_counted_whatever_the_pool_holds(
            caps in caps(),
            pool in runs(100..150),
            db in runs(150..200),
            queue in queue(),
        ) {
            let running = merge(&pool, &db);
            // Every run of either side is counted, where its side says it runs (the ids of
            // the two sides are apart here).
            for r in db.iter().chain(pool.iter()) {
                prop_assert!(running.runs_of(&r.project).contains(r));
            }
            prop_assert_eq!(running.len(), pool.len() + db.len());
            let picks = packer_for(&caps).pack(&caps, &running, &queue);
            for c in &picks {
                prop_assert!(
                    !pool.contains_project(&c.project) && !db.contains_project(&c.project),
                    "picked {} which is active", c.project
                );
            }
            if picks.is_empty() {
                return Ok(());
            }
            prop_assert!(running.len() + picks.len() <= caps.global);
            for (ns, cap) in &caps.namespaces {
                let active = running.count_in(ns);
                let picked = picks.iter().filter(|c| &c.namespace == ns).count();
                prop_assert!(
                    picked == 0 || active + picked <= cap.max_concurrency,
                    "namespace {ns}: {active} active + {picked} picked > {}", cap.max_concurrency
                );
            }
        }
    }
}
