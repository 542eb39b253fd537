//! [`NamespacePacker`], the packer used when `fleet.toml` declares namespaces: per-namespace caps
//! plus weighted fair sharing of the global cap.
//!
//! It owns the fair-share bookkeeping of one call (a lane per namespace, a heap of lanes by share)
//! and nothing beyond it: no state survives a call, and it reads what is running only from the
//! merged running set it is given, exactly as the fallback packer does.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use crate::queue::heads;
use crate::{Candidate, Caps, Packer, RunningSet, DEFAULT_NAMESPACE};

/// The packer used when `fleet.toml` declares namespaces: per-namespace caps plus weighted fair
/// sharing of the global cap.
///
/// Rules, in the order they apply:
///
/// * As for every packer, free capacity is [`Caps::free`] (the global cap's, and this host's when
///   it has a cap), with free global capacity `caps.global - running.len()` (saturating), where
///   `running` is the merged running set ([`merge`](crate::merge); a double spawn after restart
///   threatens this packer just as it does the fallback one). Runs in `running` whose namespace is
///   not declared still count against the global cap. A project never gets more than its
///   free seats ([`Caps::max_parallel_of`] minus its runs in `running`), and only its best
///   candidates (in [`queue_order`](crate::queue_order)) are ever considered.
/// * A namespace declared in `caps.namespaces` is capped: `running.count_in(ns) + picked_in(ns) <=
///   max_concurrency`. [`DEFAULT_NAMESPACE`] is capped by the global cap alone, with weight 1, unless
///   it is declared explicitly. A candidate in any other namespace is never picked: no cap is known
///   for it, and guessing one could exceed what the operator meant.
/// * While free global capacity remains, the next slot goes to the eligible namespace (one that has
///   a pickable candidate and is under its cap) with the smallest `(running_in_ns + picked_in_ns) /
///   weight`, compared by cross-multiplication so no float rounding can break a tie. A tie goes to
///   the namespace whose best remaining candidate comes first in queue order. Within a namespace,
///   candidates go in queue order.
///
/// The packer is work-conserving (it stops only when the global cap is reached or no namespace is
/// eligible) and starvation-free (a backlogged namespace's share only falls behind while others
/// catch up, so it gets the next slot within a bounded number of picks).
///
/// Cost: O(Q log Q + picks · log N) for Q candidates and N namespaces, using a heap of namespaces.
#[derive(Clone, Copy, Debug, Default)]
pub struct NamespacePacker;

impl Packer for NamespacePacker {
    fn pack(&self, caps: &Caps, running: &RunningSet, queue: &[Candidate]) -> Vec<Candidate> {
        let free = caps.free(running);
        if free == 0 {
            return Vec::new();
        }

        // One pass over the running set, instead of `count_in` per namespace (O(R·N)).
        let mut running_in: HashMap<&str, usize> = HashMap::new();
        for run in running.iter() {
            *running_in.entry(run.namespace.as_str()).or_default() += 1;
        }

        // Split the candidates into one lane per known namespace, each in queue order (`heads` is
        // sorted, and pushing preserves it).
        let mut lanes: Vec<Lane<'_>> = Vec::new();
        let mut lane_of: HashMap<&str, usize> = HashMap::new();
        for (rank, cand) in heads(caps, running, queue).into_iter().enumerate() {
            let ns = cand.namespace.as_str();
            let idx = match lane_of.get(ns) {
                Some(&idx) => idx,
                None => {
                    let (cap, weight) = match caps.namespaces.get(ns) {
                        Some(nc) => (nc.max_concurrency, nc.weight.max(1)),
                        // The global cap (checked by the loop below) is the default namespace's
                        // only cap unless it is declared.
                        None if ns == DEFAULT_NAMESPACE => (usize::MAX, 1),
                        // Unknown namespace: never picked.
                        None => continue,
                    };
                    lanes.push(Lane {
                        cap,
                        weight,
                        load: running_in.get(ns).copied().unwrap_or(0),
                        cands: Vec::new(),
                        next: 0,
                    });
                    lane_of.insert(ns, lanes.len() - 1);
                    lanes.len() - 1
                }
            };
            lanes[idx].cands.push((rank, cand));
        }

        // Min-heap of eligible lanes by (share, rank of their best remaining candidate). Only the
        // lane that just got a slot changes its key, so it is the only one to re-push.
        let mut heap: BinaryHeap<Reverse<Turn>> = lanes
            .iter()
            .enumerate()
            .filter_map(|(idx, lane)| lane.turn(idx))
            .map(Reverse)
            .collect();
        let mut picks = Vec::new();
        while picks.len() < free {
            let Some(Reverse(turn)) = heap.pop() else {
                break;
            };
            let lane = &mut lanes[turn.lane];
            picks.push(lane.cands[lane.next].1.clone());
            lane.next += 1;
            lane.load += 1;
            if let Some(turn) = lane.turn(turn.lane) {
                heap.push(Reverse(turn));
            }
        }
        picks
    }
}

/// One namespace's state during a [`NamespacePacker::pack`].
struct Lane<'q> {
    /// Its cap (`usize::MAX` for an undeclared default namespace).
    cap: usize,
    /// Its weight, at least 1.
    weight: u32,
    /// Runs counted against it: running plus picked so far.
    load: usize,
    /// Its candidates in queue order, each with its rank in the whole queue (for tie-breaks).
    cands: Vec<(usize, &'q Candidate)>,
    /// Index in `cands` of the next candidate to pick.
    next: usize,
}

impl Lane<'_> {
    /// Its place in line, if it is eligible: it has a candidate left and is under its cap.
    fn turn(&self, lane: usize) -> Option<Turn> {
        let &(rank, _) = self.cands.get(self.next)?;
        (self.load < self.cap).then_some(Turn {
            load: self.load,
            weight: self.weight,
            rank,
            lane,
        })
    }
}

/// A lane's place in the fair-share heap; smaller goes first.
#[derive(Debug)]
struct Turn {
    load: usize,
    weight: u32,
    /// Rank of the lane's best remaining candidate; unique across lanes, so the order is total.
    rank: usize,
    lane: usize,
}

impl Ord for Turn {
    fn cmp(&self, other: &Self) -> Ordering {
        // load/weight < other.load/other.weight  <=>  load*other.weight < other.load*weight
        // (weights are positive). u128 cannot overflow: usize * u32 < 2^96.
        let lhs = self.load as u128 * u128::from(other.weight);
        let rhs = other.load as u128 * u128::from(self.weight);
        lhs.cmp(&rhs).then(self.rank.cmp(&other.rank))
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Turn {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Turn {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{active, cand, caps, ids};
    use crate::NamespaceCap;

    #[test]
    fn undeclared_default_is_capped_by_global_only_and_unknown_is_never_picked() {
        let queue = vec![
            cand(1, "a", "default", 0),
            cand(2, "b", "default", 0),
            cand(3, "c", "default", 0),
            cand(4, "d", "stray", 9),
        ];
        let c = caps(3, &[("x", 1, 1)]);
        let picks = NamespacePacker.pack(&c, &RunningSet::new(), &queue);
        assert_eq!(ids(&picks), vec![1, 2, 3]);
    }

    #[test]
    fn declared_default_is_capped() {
        let queue = vec![cand(1, "a", "default", 0), cand(2, "b", "default", 0)];
        let c = caps(3, &[("default", 1, 1)]);
        let running: RunningSet = [active(9, "z", "default")].into_iter().collect();
        assert!(NamespacePacker.pack(&c, &running, &queue).is_empty());
        assert_eq!(
            ids(&NamespacePacker.pack(&c, &RunningSet::new(), &queue)),
            vec![1]
        );
    }

    #[test]
    fn runs_in_undeclared_namespaces_count_against_global() {
        let queue = vec![cand(1, "a", "x", 0), cand(2, "b", "x", 0)];
        let c = caps(2, &[("x", 5, 1)]);
        let running: RunningSet = [active(9, "z", "gone")].into_iter().collect();
        assert_eq!(ids(&NamespacePacker.pack(&c, &running, &queue)), vec![1]);
    }

    #[test]
    fn fair_share_alternates_and_ties_go_to_queue_order() {
        // "b" holds the best candidate, so it wins the 0/1 vs 0/1 tie; then they alternate.
        let queue = vec![
            cand(1, "a1", "a", 0),
            cand(2, "a2", "a", 0),
            cand(3, "a3", "a", 0),
            cand(4, "b1", "b", 1),
            cand(5, "b2", "b", 0),
            cand(6, "b3", "b", 0),
        ];
        let c = caps(4, &[("a", 9, 1), ("b", 9, 1)]);
        let picks = NamespacePacker.pack(&c, &RunningSet::new(), &queue);
        assert_eq!(ids(&picks), vec![4, 1, 2, 5]);
    }

    #[test]
    fn fair_share_counts_running_runs() {
        // "a" already holds two slots, so "b" gets the next two before "a" gets another.
        let queue = vec![
            cand(1, "a1", "a", 0),
            cand(2, "b1", "b", 0),
            cand(3, "b2", "b", 0),
            cand(4, "b3", "b", 0),
        ];
        let running: RunningSet = [active(8, "x", "a"), active(9, "y", "a")]
            .into_iter()
            .collect();
        let c = caps(5, &[("a", 9, 1), ("b", 9, 1)]);
        let picks = NamespacePacker.pack(&c, &running, &queue);
        assert_eq!(ids(&picks), vec![2, 3, 1]);
    }

    #[test]
    fn zero_weight_is_treated_as_one() {
        let queue = vec![cand(1, "a1", "a", 0), cand(2, "b1", "b", 0)];
        let c = caps(2, &[("a", 9, 0), ("b", 9, 1)]);
        assert_eq!(
            ids(&NamespacePacker.pack(&c, &RunningSet::new(), &queue)),
            vec![1, 2]
        );
    }

    #[test]
    fn large_input() {
        // ~1000 heads over ~1000 namespaces, the most the daemon hands over on one EVAL.
        let c = Caps {
            global: 900,
            namespaces: (0..1000)
                .map(|i| {
                    let cap = NamespaceCap {
                        max_concurrency: 3,
                        weight: 1 + i % 3,
                    };
                    (format!("ns{i}"), cap)
                })
                .collect(),
            max_parallel: Default::default(),
            host: Default::default(),
        };
        let queue: Vec<Candidate> = (0..1000)
            .map(|i| cand(i, &format!("p{i}"), &format!("ns{}", i % 500), i % 7))
            .collect();
        let picks = NamespacePacker.pack(&c, &RunningSet::new(), &queue);
        assert_eq!(picks.len(), 900);
    }
}
