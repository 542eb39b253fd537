//! Property tests for the host rules: a host's own capacity (`[hosts.NAME] max_concurrency`) and
//! placement (a project's `hosts` list).
//!
//! Over random caps (with and without namespaces, random `max_parallel`), random host rules,
//! running sets whose runs sit on this host, on another one, or on "this host" unnamed (`None`),
//! and random queues, both packers must never take this host past its capacity, never pick a
//! project placed elsewhere, still keep the global cap, and — the fallback packer — start as
//! many as the tightest cap allows. The oracle recomputes each rule from the inputs alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use packer::{
    packer_for, ActiveRun, Candidate, Caps, HostRules, NamespaceCap, RunningSet, DEFAULT_NAMESPACE,
};
use proptest::prelude::*;

const PROJECTS: usize = 6;
const HERE: &str = "here";

fn host_rules() -> impl Strategy<Value = HostRules> {
    (
        prop::option::of(0usize..6),
        prop::collection::vec(any::<bool>(), PROJECTS),
    )
        .prop_map(|(max_concurrency, elsewhere)| HostRules {
            name: HERE.to_string(),
            max_concurrency,
            placed_elsewhere: elsewhere
                .into_iter()
                .enumerate()
                .filter(|&(_, e)| e)
                .map(|(p, _)| format!("p{p}"))
                .collect(),
        })
}

fn caps() -> impl Strategy<Value = Caps> {
    (
        0usize..14,
        prop::option::of((0usize..8, 1u32..3)),
        prop::collection::vec(prop::option::of(0usize..4), PROJECTS),
        host_rules(),
    )
        .prop_map(|(global, ns, parallel, host)| Caps {
            global,
            namespaces: ns
                .map(|(cap, weight)| {
                    BTreeMap::from([(
                        "ops".to_string(),
                        NamespaceCap {
                            max_concurrency: cap,
                            weight,
                        },
                    )])
                })
                .unwrap_or_default(),
            max_parallel: parallel
                .into_iter()
                .enumerate()
                .filter_map(|(p, n)| n.map(|n| (format!("p{p}"), n)))
                .collect(),
            host,
        })
}

/// Runs on this host by name, on this host unnamed, or on another host.
fn running() -> impl Strategy<Value = RunningSet> {
    prop::collection::vec(
        (
            100i64..200,
            0..PROJECTS,
            prop::sample::select(vec![None, Some(HERE), Some("there")]),
        ),
        0..8,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(run_id, p, host)| ActiveRun {
                run_id,
                project: format!("p{p}"),
                namespace: namespace_of(p).to_string(),
                host: host.map(str::to_string),
            })
            .collect()
    })
}

fn queue() -> impl Strategy<Value = Vec<Candidate>> {
    prop::collection::vec((0..PROJECTS, 0i64..3), 0..25).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (p, priority))| Candidate {
                run_id: i as i64 + 1,
                project: format!("p{p}"),
                namespace: namespace_of(p).to_string(),
                priority,
            })
            .collect()
    })
}

/// Each project keeps one namespace: the even ones in "ops", the odd ones in the default.
fn namespace_of(p: usize) -> &'static str {
    ["ops", DEFAULT_NAMESPACE][p % 2]
}

/// The runs the oracle counts on this host: named after it, or unnamed.
fn on_this_host(running: &RunningSet) -> usize {
    running
        .iter()
        .filter(|r| r.host.is_none() || r.host.as_deref() == Some(HERE))
        .count()
}

/// How many runs the oracle says may start, when no namespace is declared: the free global
/// capacity, the free host capacity, and what the projects placed here can take (each its
/// seats, at most its queued runs).
fn fallback_expected(caps: &Caps, running: &RunningSet, queue: &[Candidate]) -> usize {
    let global = caps.global.saturating_sub(running.len());
    let host = caps
        .host
        .max_concurrency
        .map_or(usize::MAX, |cap| cap.saturating_sub(on_this_host(running)));
    let mut queued: HashMap<&str, usize> = HashMap::new();
    for c in queue {
        *queued.entry(c.project.as_str()).or_default() += 1;
    }
    let takeable: usize = queued
        .iter()
        .filter(|(p, _)| !caps.host.placed_elsewhere.contains(**p))
        .map(|(p, n)| {
            let max = caps.max_parallel.get(*p).copied().unwrap_or(1);
            let active = running.iter().filter(|r| r.project == *p).count();
            (*n).min(max.saturating_sub(active))
        })
        .sum();
    global.min(host).min(takeable)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_host_cap_and_placement_hold(caps in caps(), running in running(), queue in queue()) {
        let picks = packer_for(&caps).pack(&caps, &running, &queue);
        if let Some(cap) = caps.host.max_concurrency {
            prop_assert!(
                on_this_host(&running) + picks.len() <= cap.max(on_this_host(&running)),
                "{} on this host, {} picked, host cap {cap}", on_this_host(&running), picks.len()
            );
            if on_this_host(&running) >= cap {
                prop_assert!(picks.is_empty(), "the host is full, yet {picks:?} were picked");
            }
        }
        for c in &picks {
            prop_assert!(
                !caps.host.placed_elsewhere.contains(&c.project),
                "{} is placed elsewhere, yet run {} was picked here", c.project, c.run_id
            );
        }
        // Runs on other hosts still fill the global cap.
        prop_assert!(running.len() + picks.len() <= caps.global.max(running.len()));
        let ids: BTreeSet<i64> = picks.iter().map(|c| c.run_id).collect();
        prop_assert_eq!(ids.len(), picks.len(), "a run picked twice");
    }

    #[test]
    fn the_fallback_packer_fills_the_tightest_cap(
        caps in caps(),
        running in running(),
        queue in queue(),
    ) {
        let mut caps = caps;
        caps.namespaces.clear();
        let picks = packer_for(&caps).pack(&caps, &running, &queue);
        prop_assert_eq!(picks.len(), fallback_expected(&caps, &running, &queue));
    }
}

/// Runs on another host do not count against this host's capacity; unnamed ones do.
#[test]
fn only_this_hosts_runs_fill_its_capacity() {
    let caps = Caps {
        global: 10,
        host: HostRules {
            name: HERE.into(),
            max_concurrency: Some(2),
            placed_elsewhere: BTreeSet::new(),
        },
        ..Caps::default()
    };
    let run = |id, host: Option<&str>| ActiveRun {
        run_id: id,
        project: format!("r{id}"),
        namespace: DEFAULT_NAMESPACE.into(),
        host: host.map(str::to_string),
    };
    let queue: Vec<Candidate> = (1..=5)
        .map(|i| Candidate {
            run_id: i,
            project: format!("q{i}"),
            namespace: DEFAULT_NAMESPACE.into(),
            priority: 0,
        })
        .collect();
    let elsewhere: RunningSet = [run(100, Some("there")), run(101, Some("there"))]
        .into_iter()
        .collect();
    assert_eq!(packer_for(&caps).pack(&caps, &elsewhere, &queue).len(), 2);
    let one_here: RunningSet = [run(100, None), run(101, Some("there"))]
        .into_iter()
        .collect();
    assert_eq!(packer_for(&caps).pack(&caps, &one_here, &queue).len(), 1);
}
