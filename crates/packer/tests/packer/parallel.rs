//! Property tests for `max_parallel`: projects that may run several at once.
//!
//! Over random caps (with and without namespaces, with random `max_parallel` per project),
//! random running sets (several runs of one project) and random queues, both packers must keep
//! every project within its seats, take each project's best candidates first, keep the global
//! and namespace caps, and — the fallback packer — start as many as the caps allow. The oracle
//! recomputes each rule from the inputs alone.

use std::collections::{BTreeMap, HashMap};

use packer::{packer_for, ActiveRun, Candidate, Caps, NamespaceCap, RunningSet, DEFAULT_NAMESPACE};
use proptest::prelude::*;

const NAMESPACES: [&str; 3] = ["ops", "dev", DEFAULT_NAMESPACE];
const PROJECTS: usize = 5;

fn caps() -> impl Strategy<Value = Caps> {
    (
        0usize..12,
        prop::option::of((0usize..6, 0usize..6)),
        prop::collection::vec(prop::option::of(0usize..5), PROJECTS),
    )
        .prop_map(|(global, ns, parallel)| Caps {
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
            max_parallel: parallel
                .into_iter()
                .enumerate()
                .filter_map(|(p, n)| n.map(|n| (format!("p{p}"), n)))
                .collect(),
            host: Default::default(),
        })
}

fn running() -> impl Strategy<Value = RunningSet> {
    prop::collection::vec(
        (
            100i64..200,
            0..PROJECTS,
            prop::sample::select(&NAMESPACES[..]),
        ),
        0..8,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(run_id, p, ns)| ActiveRun {
                run_id,
                project: format!("p{p}"),
                namespace: ns.to_string(),
                host: None,
            })
            .collect()
    })
}

fn queue() -> impl Strategy<Value = Vec<Candidate>> {
    // Ids are unique (a real queue never repeats one), projects keep one namespace each.
    prop::collection::vec((0..PROJECTS, 0i64..3), 0..25).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (p, priority))| Candidate {
                run_id: i as i64 + 1,
                project: format!("p{p}"),
                namespace: NAMESPACES[p % NAMESPACES.len()].to_string(),
                priority,
            })
            .collect()
    })
}

/// Queue order written out independently of `packer::queue_order`.
fn key(c: &Candidate) -> (std::cmp::Reverse<i64>, i64) {
    (std::cmp::Reverse(c.priority), c.run_id)
}

/// Seats the oracle allows `project`: its max_parallel (1 when absent) minus its active runs.
fn seats(caps: &Caps, running: &RunningSet, project: &str) -> usize {
    let max = caps.max_parallel.get(project).copied().unwrap_or(1);
    let active = running.iter().filter(|r| r.project == project).count();
    max.saturating_sub(active)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn no_project_exceeds_its_seats_and_caps_hold(
        caps in caps(),
        running in running(),
        queue in queue(),
    ) {
        let picks = packer_for(&caps).pack(&caps, &running, &queue);
        let mut per_project: HashMap<&str, Vec<&Candidate>> = HashMap::new();
        for c in &picks {
            per_project.entry(c.project.as_str()).or_default().push(c);
        }
        for (project, picked) in &per_project {
            prop_assert!(
                picked.len() <= seats(&caps, &running, project),
                "{project}: {} picked, {} seats free", picked.len(), seats(&caps, &running, project)
            );
            // A project's picks are its best candidates, in queue order.
            let mut own: Vec<&Candidate> = queue.iter().filter(|c| &c.project == project).collect();
            own.sort_by_key(|c| key(c));
            let mut got = picked.clone();
            got.sort_by_key(|c| key(c));
            prop_assert_eq!(&got[..], &own[..got.len()]);
        }
        let mut ids: Vec<i64> = picks.iter().map(|c| c.run_id).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), picks.len(), "a run picked twice");
        prop_assert!(picks.is_empty() || running.len() + picks.len() <= caps.global);
        for (ns, cap) in &caps.namespaces {
            let active = running.count_in(ns);
            let picked = picks.iter().filter(|c| &c.namespace == ns).count();
            prop_assert!(picked == 0 || active + picked <= cap.max_concurrency);
        }
        if caps.namespaces.is_empty() {
            // The fallback packer stops only at the global cap or when no seat is left.
            let startable: usize = {
                let mut per: BTreeMap<&str, usize> = BTreeMap::new();
                for c in &queue {
                    *per.entry(c.project.as_str()).or_default() += 1;
                }
                per.iter().map(|(p, n)| (*n).min(seats(&caps, &running, p))).sum()
            };
            let free = caps.global.saturating_sub(running.len());
            prop_assert_eq!(picks.len(), startable.min(free));
        }
    }
}

/// Three seats, ten queued runs, nothing else: three start; with two active, one more.
#[test]
fn three_seats_start_three_then_refill() {
    let caps = Caps {
        global: 10,
        namespaces: BTreeMap::new(),
        max_parallel: BTreeMap::from([("p".to_string(), 3)]),
        host: Default::default(),
    };
    let queue: Vec<Candidate> = (1..=10)
        .map(|i| Candidate {
            run_id: i,
            project: "p".into(),
            namespace: DEFAULT_NAMESPACE.into(),
            priority: 0,
        })
        .collect();
    let picks = packer_for(&caps).pack(&caps, &RunningSet::new(), &queue);
    assert_eq!(
        picks.iter().map(|c| c.run_id).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let running: RunningSet = [1, 2]
        .into_iter()
        .map(|run_id| ActiveRun {
            run_id,
            project: "p".into(),
            namespace: DEFAULT_NAMESPACE.into(),
            host: None,
        })
        .collect();
    let picks = packer_for(&caps).pack(&caps, &running, &queue[2..]);
    assert_eq!(picks.iter().map(|c| c.run_id).collect::<Vec<_>>(), [3]);
}
