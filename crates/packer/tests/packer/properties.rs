//! Property tests for both packers over random caps, running sets and queues.
//!
//! The oracle below recomputes what each rule allows from the inputs alone (the best candidate of
//! each project, which namespaces are known, how full each cap is) without calling into the packer's
//! own helpers, and checks the packers' output against it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use packer::{
    packer_for, ActiveRun, Candidate, Caps, FallbackPacker, NamespaceCap, NamespacePacker, Packer,
    RunningSet, DEFAULT_NAMESPACE,
};
use proptest::prelude::*;

/// Namespaces that a random `Caps` may declare.
const DECLARABLE: [&str; 5] = ["a", "b", "c", "ops", DEFAULT_NAMESPACE];
/// Namespaces that runs and candidates may carry: the declarable ones plus one never declared.
const ANY_NAMESPACE: [&str; 6] = ["a", "b", "c", "ops", DEFAULT_NAMESPACE, "stray"];

fn caps_strategy() -> impl Strategy<Value = Caps> {
    // Each declarable namespace is declared or not, so 0..=5 namespaces, caps 0..5, weights 1..=3.
    (
        0usize..8,
        prop::collection::vec(prop::option::of((0usize..5, 1u32..=3)), DECLARABLE.len()),
    )
        .prop_map(|(global, declared)| Caps {
            max_parallel: BTreeMap::new(),
            host: Default::default(),
            global,
            namespaces: DECLARABLE
                .iter()
                .zip(declared)
                .filter_map(|(ns, d)| {
                    d.map(|(max_concurrency, weight)| {
                        (
                            ns.to_string(),
                            NamespaceCap {
                                max_concurrency,
                                weight,
                            },
                        )
                    })
                })
                .collect(),
        })
}

fn running_strategy() -> impl Strategy<Value = RunningSet> {
    prop::collection::vec(
        (
            100i64..200,
            0usize..10,
            prop::sample::select(&ANY_NAMESPACE[..]),
        ),
        0..8,
    )
    .prop_map(|runs| {
        runs.into_iter()
            .map(|(run_id, p, ns)| ActiveRun {
                run_id,
                project: format!("p{p}"),
                namespace: ns.to_string(),
                host: None,
            })
            .collect()
    })
}

fn queue_strategy() -> impl Strategy<Value = Vec<Candidate>> {
    // Ten projects for up to 25 candidates: duplicate projects are common, and so (with 60 ids)
    // are duplicate priorities; a project may even be queued under different namespaces.
    prop::collection::vec(
        (
            1i64..60,
            0usize..10,
            prop::sample::select(&ANY_NAMESPACE[..]),
            0i64..3,
        ),
        0..25,
    )
    .prop_map(|cands| {
        cands
            .into_iter()
            .map(|(run_id, p, ns, priority)| Candidate {
                run_id,
                project: format!("p{p}"),
                namespace: ns.to_string(),
                priority,
            })
            .collect()
    })
}

/// Sort key for queue order, written out independently of `packer::queue_order`.
fn key(c: &Candidate) -> (std::cmp::Reverse<i64>, i64, &str, &str) {
    (
        std::cmp::Reverse(c.priority),
        c.run_id,
        c.project.as_str(),
        c.namespace.as_str(),
    )
}

/// The best candidate (in queue order) of every project not running, sorted in queue order.
fn heads(running: &RunningSet, queue: &[Candidate]) -> Vec<Candidate> {
    let mut best: BTreeMap<&str, &Candidate> = BTreeMap::new();
    for c in queue {
        let slot = best.entry(c.project.as_str()).or_insert(c);
        if key(c) < key(slot) {
            *slot = c;
        }
    }
    let mut heads: Vec<Candidate> = best
        .into_values()
        .filter(|c| running.iter().all(|r| r.project != c.project))
        .cloned()
        .collect();
    heads.sort_by(|a, b| key(a).cmp(&key(b)));
    heads
}

fn free(caps: &Caps, running: &RunningSet) -> usize {
    caps.global.saturating_sub(running.len())
}

fn count_in(picks: &[Candidate], ns: &str) -> usize {
    picks.iter().filter(|c| c.namespace == ns).count()
}

/// The namespace packer's cap for `ns`: `Some(None)` uncapped (undeclared default), `Some(Some(n))`
/// capped at n, `None` unknown (never picked).
fn ns_cap(caps: &Caps, ns: &str) -> Option<Option<usize>> {
    match caps.namespaces.get(ns) {
        Some(nc) => Some(Some(nc.max_concurrency)),
        None if ns == DEFAULT_NAMESPACE => Some(None),
        None => None,
    }
}

fn ns_weight(caps: &Caps, ns: &str) -> u64 {
    caps.namespaces.get(ns).map_or(1, |nc| u64::from(nc.weight))
}

/// Whether the namespace packer may still pick `c` (a head) given `picked` so far, ignoring the
/// global cap.
fn ns_allows(caps: &Caps, running: &RunningSet, picked: &[Candidate], c: &Candidate) -> bool {
    match ns_cap(caps, &c.namespace) {
        None => false,
        Some(None) => true,
        Some(Some(max)) => running.count_in(&c.namespace) + count_in(picked, &c.namespace) < max,
    }
}

/// Rules both packers obey.
fn check_common(
    caps: &Caps,
    running: &RunningSet,
    queue: &[Candidate],
    picks: &[Candidate],
) -> Result<(), TestCaseError> {
    // Never over the global cap (and nothing at all when running already fills it).
    prop_assert!(picks.len() <= free(caps, running), "over global cap");
    // Never a project already running.
    for p in picks {
        prop_assert!(
            !running.contains_project(&p.project),
            "picked running project {}",
            p.project
        );
    }
    // Never two runs of one project.
    let projects: BTreeSet<&str> = picks.iter().map(|c| c.project.as_str()).collect();
    prop_assert_eq!(projects.len(), picks.len(), "two runs of one project");
    // Every pick comes from the queue, and is its project's best candidate.
    let heads = heads(running, queue);
    for p in picks {
        prop_assert!(queue.contains(p), "pick not from queue: {:?}", p);
        prop_assert!(
            heads.contains(p),
            "not the project's best candidate: {:?}",
            p
        );
    }
    Ok(())
}

fn check_fallback(
    caps: &Caps,
    running: &RunningSet,
    queue: &[Candidate],
    picks: &[Candidate],
) -> Result<(), TestCaseError> {
    check_common(caps, running, queue, picks)?;
    let heads = heads(running, queue);
    // Work-conserving.
    if picks.is_empty() {
        prop_assert!(free(caps, running) == 0 || heads.is_empty());
    }
    // Exactly the first `free` heads, in queue order, whatever their namespace.
    let n = free(caps, running).min(heads.len());
    prop_assert_eq!(picks, &heads[..n]);
    Ok(())
}

fn check_namespace(
    caps: &Caps,
    running: &RunningSet,
    queue: &[Candidate],
    picks: &[Candidate],
) -> Result<(), TestCaseError> {
    check_common(caps, running, queue, picks)?;
    let heads = heads(running, queue);

    // Only known namespaces, and never over a namespace cap, checked pick by pick.
    for (i, p) in picks.iter().enumerate() {
        prop_assert!(
            ns_cap(caps, &p.namespace).is_some(),
            "picked from unknown namespace {}",
            p.namespace
        );
        prop_assert!(
            ns_allows(caps, running, &picks[..i], p),
            "over the cap of {}",
            p.namespace
        );
    }
    for (ns, nc) in &caps.namespaces {
        prop_assert!(
            count_in(picks, ns) <= nc.max_concurrency.saturating_sub(running.count_in(ns)),
            "over the cap of {}",
            ns
        );
    }

    // Work-conserving, as stated: an empty pick means no free capacity or nothing eligible, with
    // eligibility computed from the inputs alone.
    if picks.is_empty() {
        let any_eligible = heads.iter().any(|c| ns_allows(caps, running, &[], c));
        prop_assert!(free(caps, running) == 0 || !any_eligible);
    }
    // And in the stronger form: if the global cap was not reached, everything left is blocked.
    if picks.len() < free(caps, running) {
        for c in heads.iter().filter(|c| !picks.contains(c)) {
            prop_assert!(
                !ns_allows(caps, running, picks, c),
                "left {:?} although its namespace had room",
                c
            );
        }
    }

    // Within a namespace, queue order: the picks of a namespace are its first heads, in order.
    let namespaces: BTreeSet<&str> = picks.iter().map(|c| c.namespace.as_str()).collect();
    for ns in namespaces {
        let ns_picks: Vec<&Candidate> = picks.iter().filter(|c| c.namespace == ns).collect();
        let ns_heads: Vec<&Candidate> = heads.iter().filter(|c| c.namespace == ns).collect();
        prop_assert_eq!(&ns_picks[..], &ns_heads[..ns_picks.len()]);
    }

    // Weighted fair share, as "no envy": when namespace X got its last slot, any namespace Y still
    // eligible at the end was eligible then too, with no more load than now, so X's load/weight
    // before that slot was at most Y's final load/weight.
    let load = |ns: &str| (running.count_in(ns) + count_in(picks, ns)) as u64;
    let still_eligible: BTreeSet<&str> = heads
        .iter()
        .filter(|c| !picks.contains(c) && ns_allows(caps, running, picks, c))
        .map(|c| c.namespace.as_str())
        .collect();
    let picked_ns: BTreeSet<&str> = picks.iter().map(|c| c.namespace.as_str()).collect();
    for x in &picked_ns {
        for y in &still_eligible {
            prop_assert!(
                (load(x) - 1) * ns_weight(caps, y) <= load(y) * ns_weight(caps, x),
                "{} got a slot while {} had a smaller share",
                x,
                y
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn fallback_packer_obeys_its_rules(
        caps in caps_strategy(),
        running in running_strategy(),
        queue in queue_strategy(),
    ) {
        let picks = FallbackPacker.pack(&caps, &running, &queue);
        check_fallback(&caps, &running, &queue, &picks)?;
    }

    #[test]
    fn namespace_packer_obeys_its_rules(
        caps in caps_strategy(),
        running in running_strategy(),
        queue in queue_strategy(),
    ) {
        let picks = NamespacePacker.pack(&caps, &running, &queue);
        check_namespace(&caps, &running, &queue, &picks)?;
    }

    #[test]
    fn packer_for_obeys_the_rules_of_the_packer_it_picks(
        caps in caps_strategy(),
        running in running_strategy(),
        queue in queue_strategy(),
    ) {
        let picks = packer_for(&caps).pack(&caps, &running, &queue);
        if caps.namespaces.is_empty() {
            check_fallback(&caps, &running, &queue, &picks)?;
        } else {
            check_namespace(&caps, &running, &queue, &picks)?;
        }
    }

    #[test]
    fn packers_ignore_input_order(
        caps in caps_strategy(),
        running in running_strategy(),
        queue in queue_strategy(),
    ) {
        let mut reversed = queue.clone();
        reversed.reverse();
        for packer in [&FallbackPacker as &dyn Packer, &NamespacePacker] {
            prop_assert_eq!(
                packer.pack(&caps, &running, &queue),
                packer.pack(&caps, &running, &reversed)
            );
        }
    }

    #[test]
    fn equal_weights_split_a_binding_global_cap_evenly(
        (global, queue) in backlog(1..8, 1),
    ) {
        let caps = two_namespaces(global, 1, 1);
        let picks = NamespacePacker.pack(&caps, &RunningSet::new(), &queue);
        let (a, b) = (count_in(&picks, "a"), count_in(&picks, "b"));
        prop_assert_eq!(a + b, global);
        prop_assert!(a.abs_diff(b) <= 1, "a={} b={}", a, b);
    }

    #[test]
    fn weights_one_and_two_split_a_binding_global_cap_proportionally(
        (global, queue) in backlog(1..13, 2),
    ) {
        let caps = two_namespaces(global, 1, 2);
        let picks = NamespacePacker.pack(&caps, &RunningSet::new(), &queue);
        let (a, b) = (count_in(&picks, "a"), count_in(&picks, "b"));
        prop_assert_eq!(a + b, global);
        // Ideal split: a = global/3, b = 2·global/3; within one of it means |3a - global| <= 3.
        prop_assert!((3 * a).abs_diff(global) <= 3, "global={} a={} b={}", global, a, b);
        prop_assert!((3 * b).abs_diff(2 * global) <= 3, "global={} a={} b={}", global, a, b);
    }
}

/// Caps with two namespaces "a" and "b" whose own caps cannot bind, so only the global cap does.
fn two_namespaces(global: usize, weight_a: u32, weight_b: u32) -> Caps {
    let ns = |weight| NamespaceCap {
        max_concurrency: 1000,
        weight,
    };
    Caps {
        max_parallel: BTreeMap::new(),
        host: Default::default(),
        global,
        namespaces: BTreeMap::from([("a".into(), ns(weight_a)), ("b".into(), ns(weight_b))]),
    }
}

/// A global cap and a queue in which namespaces "a" and "b" each hold more distinct projects than
/// the global cap (at least `factor` times as many, plus extra), with random priorities, unique ids
/// in random order, shuffled.
fn backlog(
    global: std::ops::Range<usize>,
    factor: usize,
) -> impl Strategy<Value = (usize, Vec<Candidate>)> {
    global
        .prop_flat_map(move |g| (Just(g), 1..=5usize, 1..=5usize))
        .prop_flat_map(move |(g, extra_a, extra_b)| {
            let (na, nb) = (g * factor + extra_a, g * factor + extra_b);
            (
                Just(g),
                prop::collection::vec(0i64..3, na + nb),
                Just((1..=(na + nb) as i64).collect::<Vec<_>>()).prop_shuffle(),
                Just(na),
            )
        })
        .prop_flat_map(|(g, priorities, ids, na)| {
            let queue: Vec<Candidate> = priorities
                .into_iter()
                .zip(ids)
                .enumerate()
                .map(|(i, (priority, run_id))| {
                    let ns = if i < na { "a" } else { "b" };
                    Candidate {
                        run_id,
                        project: format!("{ns}{i}"),
                        namespace: ns.to_string(),
                        priority,
                    }
                })
                .collect();
            (Just(g), Just(queue).prop_shuffle())
        })
}

/// Many namespaces, all backlogged: no namespace is starved, each gets within one of an even share.
#[test]
fn many_equal_namespaces_share_evenly() {
    let namespaces: Vec<String> = (0..7).map(|i| format!("n{i}")).collect();
    let caps = Caps {
        max_parallel: BTreeMap::new(),
        host: Default::default(),
        global: 20,
        namespaces: namespaces
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    NamespaceCap {
                        max_concurrency: 100,
                        weight: 1,
                    },
                )
            })
            .collect(),
    };
    // Namespace n0 holds all the most urgent runs; it must still not take more than its share.
    let queue: Vec<Candidate> = (0..70)
        .map(|i| Candidate {
            run_id: i,
            project: format!("p{i}"),
            namespace: namespaces[(i / 10) as usize].clone(),
            priority: if i < 10 { 100 } else { 0 },
        })
        .collect();
    let picks = NamespacePacker.pack(&caps, &RunningSet::new(), &queue);
    assert_eq!(picks.len(), 20);
    let counts: HashMap<&str, usize> = namespaces
        .iter()
        .map(|n| (n.as_str(), count_in(&picks, n)))
        .collect();
    for (n, c) in &counts {
        assert!((2..=3).contains(c), "{n} got {c} of 20: {counts:?}");
    }
}
