//! fleet's packers: the decision "which queued runs start now?".
//!
//! A packer is a pure function `(caps, running set, queue) -> runs to start`. This crate does no I/O:
//! no database, no processes, no clock, no async runtime. That is deliberate. The supervisor's EVAL
//! gathers its inputs (caps from `fleet.toml`, the running set, the queue), calls a packer, and then
//! applies the decision (claim, spawn). Keeping the decision apart from its effects lets every rule
//! below be checked by property tests over random inputs, and lets a future deterministic simulation
//! drive the same code the daemon runs.
//!
//! The crate holds:
//!
//! * [`RunningSet`], the active runs keyed by project, and [`merge`], which builds the one running
//!   set every packer must read from the in-memory slot pool and the DB running set;
//! * [`Candidate`] and [`queue_order`], the queued runs and the order they are considered in;
//! * [`Caps`], the global and per-namespace concurrency caps;
//! * the two packers, [`FallbackPacker`] (no namespaces declared) and [`NamespacePacker`]
//!   (namespaces declared), and [`packer_for`], which picks between them.
//!
//! # Why the running set is merged before packing
//!
//! The failure this prevents, "double spawn after restart": a scheduler kept two sources of truth for
//! what is running, the database and an in-memory slot pool. After a restart the pool was empty, and
//! the packer used when no namespaces were configured counted only the pool, so it started again a
//! project the database still recorded as in flight. Here neither packer can see the slot pool on its
//! own: both take a single [`RunningSet`], and the only supported way to build the one the daemon
//! passes is [`merge`], where the DB record wins.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

/// The id of a run, as the store assigns it (SQLite `INTEGER PRIMARY KEY`, so an `i64`).
///
/// Ids grow with insertion, which is why a lower id means "queued earlier" in [`queue_order`].
pub type RunId = i64;

/// The namespace of a project that declares none in `fleet.toml`.
///
/// It needs no entry in [`Caps::namespaces`]: without one it is capped by the global cap alone and
/// has weight 1 (see [`NamespacePacker`]).
pub const DEFAULT_NAMESPACE: &str = "default";

/// One active run (status `starting` or `running`), as the running set records it.
///
/// `namespace` is the namespace the run was started in. A run keeps counting against that namespace
/// until it ends, even if `fleet.toml` has since moved its project elsewhere: the slot it occupies
/// was granted under the old namespace's cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveRun {
    /// The run's id.
    pub run_id: RunId,
    /// The project the run belongs to; the key of the [`RunningSet`].
    pub project: String,
    /// The namespace the run was started in (where it is counted).
    pub namespace: String,
}

/// The active runs, keyed by project.
///
/// At most one run per project is active: the store enforces it with a partial unique index, and
/// this type mirrors it by keying on the project name, so "two active runs of one project" cannot
/// even be represented here. A `BTreeMap` keeps iteration order deterministic, which keeps every
/// packer deterministic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunningSet {
    by_project: BTreeMap<String, ActiveRun>,
}

impl RunningSet {
    /// An empty running set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `run` as the active run of its project, replacing and returning the one recorded
    /// before, if any.
    pub fn insert(&mut self, run: ActiveRun) -> Option<ActiveRun> {
        self.by_project.insert(run.project.clone(), run)
    }

    /// Forgets the active run of `project` and returns it, if there was one.
    pub fn remove_project(&mut self, project: &str) -> Option<ActiveRun> {
        self.by_project.remove(project)
    }

    /// Whether `project` has an active run.
    pub fn contains_project(&self, project: &str) -> bool {
        self.by_project.contains_key(project)
    }

    /// The active run of `project`, if any.
    pub fn get(&self, project: &str) -> Option<&ActiveRun> {
        self.by_project.get(project)
    }

    /// The number of active runs (one per project). Every one of them counts against the global
    /// cap, whatever its namespace.
    pub fn len(&self) -> usize {
        self.by_project.len()
    }

    /// Whether no run is active.
    pub fn is_empty(&self) -> bool {
        self.by_project.is_empty()
    }

    /// The number of active runs counted against `namespace`, i.e. whose [`ActiveRun::namespace`]
    /// (the namespace they were started in) is `namespace`.
    ///
    /// This walks the whole set (O(len)); the packers tally all namespaces in one pass instead.
    pub fn count_in(&self, namespace: &str) -> usize {
        self.iter().filter(|r| r.namespace == namespace).count()
    }

    /// The active runs, in project-name order.
    pub fn iter(&self) -> impl Iterator<Item = &ActiveRun> {
        self.by_project.values()
    }
}

impl FromIterator<ActiveRun> for RunningSet {
    /// Builds a running set; where several runs share a project, the last one wins (as with
    /// [`RunningSet::insert`]).
    fn from_iter<I: IntoIterator<Item = ActiveRun>>(iter: I) -> Self {
        let mut set = RunningSet::new();
        for run in iter {
            set.insert(run);
        }
        set
    }
}

/// The running set every packer must see: the union of the live slot pool (`live`, the runs this
/// daemon process supervises right now) and the DB running set (`persisted`, the runs the database
/// records as `starting` or `running`), keyed by project.
///
/// Where both hold an entry for one project, the persisted record wins: the database is the durable
/// truth, and the slot pool is only a cache of it that a restart empties.
///
/// This is the guard against a double spawn after restart. After a restart the slot pool is
/// empty while the database may still record runs in flight (adopted or about to be
/// recovered). A packer that read only the slot pool would see free capacity and start those
/// projects a second time. So the daemon must call `merge` and hand the result to the packer,
/// whichever packer it is. The union (rather than the DB set alone) also covers the short
/// window in which the pool knows of a run whose state change the daemon has not yet read back.
///
/// Cost: O((|live| + |persisted|) log n).
pub fn merge(live: &RunningSet, persisted: &RunningSet) -> RunningSet {
    let mut merged = live.clone();
    for run in persisted.iter() {
        // Inserting after the live entries is what makes the DB record win on conflict.
        merged.insert(run.clone());
    }
    merged
}

/// A queued run that may be started.
///
/// `priority` is the run's priority (higher starts first); `namespace` is the namespace its project
/// is declared in now (use [`DEFAULT_NAMESPACE`] for a project that declares none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The run's id.
    pub run_id: RunId,
    /// The project the run belongs to.
    pub project: String,
    /// The namespace the run would be started in (and then counted against).
    pub namespace: String,
    /// Higher is more urgent.
    pub priority: i64,
}

/// The queue order: higher `priority` first, then lower `run_id` first (FIFO among equals, since ids
/// grow with insertion).
///
/// Ties beyond that (only possible with malformed input, e.g. duplicate ids) are broken by project
/// and then namespace name, so the packers' output never depends on the order of their input slice.
pub fn queue_order(a: &Candidate, b: &Candidate) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(a.run_id.cmp(&b.run_id))
        .then_with(|| a.project.cmp(&b.project))
        .then_with(|| a.namespace.cmp(&b.namespace))
}

/// The caps of one namespace declared in `fleet.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceCap {
    /// At most this many runs counted against the namespace may be active at once (runs, not
    /// processes; 0 stops the namespace from starting anything).
    pub max_concurrency: usize,
    /// Its share of the global cap when the global cap binds, relative to the other namespaces'
    /// weights. Must be at least 1; the packer treats 0 as 1 rather than starve the namespace.
    pub weight: u32,
}

/// The concurrency caps, as declared in `fleet.toml`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// At most this many runs may be active at once, over all namespaces.
    pub global: usize,
    /// The declared namespaces, by name. Empty means "no namespaces declared", which selects the
    /// [`FallbackPacker`] (see [`packer_for`]).
    pub namespaces: BTreeMap<String, NamespaceCap>,
}

/// Decides which queued runs to start.
///
/// Implementations are pure: same inputs, same output, no side effects.
pub trait Packer {
    /// Returns the candidates to start now, in the order they should be started.
    ///
    /// `running` must be the merged running set ([`merge`] of the slot pool and the DB running set),
    /// never the slot pool alone, or a restart (empty pool) starts in-flight projects again.
    /// `queue` may be in any order and may hold several candidates of one project.
    ///
    /// Every implementation guarantees: no project that is in `running` is picked; at most one
    /// candidate per project is picked, and it is that project's best candidate in [`queue_order`];
    /// `running.len()` plus the number picked never exceeds `caps.global` (and nothing is picked if
    /// `running` already fills it).
    fn pack(&self, caps: &Caps, running: &RunningSet, queue: &[Candidate]) -> Vec<Candidate>;
}

/// The packer used when `fleet.toml` declares no namespaces: one global cap, queue order.
///
/// It picks the best candidate of each project not already running, in [`queue_order`], until the
/// free global capacity (`caps.global - running.len()`, saturating) is used up. It ignores namespaces
/// entirely, except that every run in `running` counts against the global cap whatever its
/// namespace.
///
/// This is the kind of packer that causes a double spawn after restart when fed the pool: its
/// predecessor counted only the in-memory slot pool, which is empty after a restart, and so
/// started again a project the database still recorded as in flight. It must be given the
/// merged running set ([`merge`]); the tests
/// `empty_slot_pool_with_db_running_project_is_not_picked_fallback` pin that down.
///
/// Cost: O(Q log Q) for a queue of Q candidates.
#[derive(Clone, Copy, Debug, Default)]
pub struct FallbackPacker;

impl Packer for FallbackPacker {
    fn pack(&self, caps: &Caps, running: &RunningSet, queue: &[Candidate]) -> Vec<Candidate> {
        let free = caps.global.saturating_sub(running.len());
        if free == 0 {
            return Vec::new();
        }
        heads(running, queue)
            .into_iter()
            .take(free)
            .cloned()
            .collect()
    }
}

/// The packer used when `fleet.toml` declares namespaces: per-namespace caps plus weighted fair
/// sharing of the global cap.
///
/// Rules, in the order they apply:
///
/// * As for every packer, free global capacity is `caps.global - running.len()` (saturating), where
///   `running` is the merged running set ([`merge`]; a double spawn after restart threatens this packer
///   just as to the fallback one). Runs in `running` whose namespace is not declared still count
///   against the global cap. A project in `running` is never picked, and only the best candidate of
///   each project (in [`queue_order`]) is ever considered.
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
        let free = caps.global.saturating_sub(running.len());
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
        for (rank, cand) in heads(running, queue).into_iter().enumerate() {
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

/// Picks the packer for `caps`: the [`NamespacePacker`] if `fleet.toml` declares any namespace
/// (`caps.namespaces` non-empty), else the [`FallbackPacker`]. Both read the same merged running
/// set, so which one is chosen never changes what counts as running.
pub fn packer_for(caps: &Caps) -> &'static dyn Packer {
    if caps.namespaces.is_empty() {
        &FallbackPacker
    } else {
        &NamespacePacker
    }
}

/// The candidates any packer may consider, in queue order: the best candidate of each project that
/// is not in `running`. O(Q log Q).
///
/// Taking the best per project *before* any namespace rule keeps "at most one run per project per
/// pick, and the best one" true by construction, whatever the packer does next.
fn heads<'q>(running: &RunningSet, queue: &'q [Candidate]) -> Vec<&'q Candidate> {
    let mut sorted: Vec<&Candidate> = queue.iter().collect();
    sorted.sort_unstable_by(|a, b| queue_order(a, b));
    let mut seen: HashSet<&str> = HashSet::new();
    sorted
        .into_iter()
        // `seen.insert` returns false for the second and later candidates of a project, which all
        // come after its best one in the sorted order.
        .filter(|c| seen.insert(c.project.as_str()) && !running.contains_project(&c.project))
        .collect()
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

    fn cand(run_id: RunId, project: &str, namespace: &str, priority: i64) -> Candidate {
        Candidate {
            run_id,
            project: project.into(),
            namespace: namespace.into(),
            priority,
        }
    }

    fn active(run_id: RunId, project: &str, namespace: &str) -> ActiveRun {
        ActiveRun {
            run_id,
            project: project.into(),
            namespace: namespace.into(),
        }
    }

    fn ids(picks: &[Candidate]) -> Vec<RunId> {
        picks.iter().map(|c| c.run_id).collect()
    }

    fn caps(global: usize, ns: &[(&str, usize, u32)]) -> Caps {
        Caps {
            global,
            namespaces: ns
                .iter()
                .map(|&(n, max_concurrency, weight)| {
                    (
                        n.to_string(),
                        NamespaceCap {
                            max_concurrency,
                            weight,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn running_set_is_keyed_by_project() {
        let mut set = RunningSet::new();
        assert!(set.is_empty());
        assert_eq!(set.insert(active(1, "p", "a")), None);
        assert_eq!(set.insert(active(2, "p", "b")), Some(active(1, "p", "a")));
        set.insert(active(3, "q", "b"));
        assert_eq!(set.len(), 2);
        assert_eq!(set.count_in("b"), 2);
        assert_eq!(set.count_in("a"), 0);
        assert_eq!(set.get("p"), Some(&active(2, "p", "b")));
        assert_eq!(set.remove_project("p"), Some(active(2, "p", "b")));
        assert!(!set.contains_project("p"));
        let collected: RunningSet = [active(4, "r", "a"), active(5, "r", "c")]
            .into_iter()
            .collect();
        assert_eq!(collected.get("r"), Some(&active(5, "r", "c")));
    }

    #[test]
    fn queue_order_is_priority_then_fifo() {
        let queue = vec![
            cand(3, "a", "default", 0),
            cand(1, "b", "default", 0),
            cand(7, "c", "default", 5),
            cand(2, "d", "default", -1),
        ];
        let picks = FallbackPacker.pack(&caps(10, &[]), &RunningSet::new(), &queue);
        assert_eq!(ids(&picks), vec![7, 1, 3, 2]);
    }

    #[test]
    fn best_candidate_per_project_only() {
        let queue = vec![
            cand(1, "p", "default", 0),
            cand(2, "p", "default", 9),
            cand(3, "q", "default", 0),
        ];
        let picks = FallbackPacker.pack(&caps(10, &[]), &RunningSet::new(), &queue);
        assert_eq!(ids(&picks), vec![2, 3]);
        let picks = NamespacePacker.pack(&caps(10, &[("x", 1, 1)]), &RunningSet::new(), &queue);
        assert_eq!(ids(&picks), vec![2, 3]);
    }

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
    fn packer_for_chooses_by_declared_namespaces() {
        // Distinguish by behaviour: only the namespace packer refuses an unknown namespace.
        let queue = vec![cand(1, "a", "stray", 0)];
        let none = caps(1, &[]);
        let some = caps(1, &[("x", 1, 1)]);
        assert_eq!(
            packer_for(&none)
                .pack(&none, &RunningSet::new(), &queue)
                .len(),
            1
        );
        assert!(packer_for(&some)
            .pack(&some, &RunningSet::new(), &queue)
            .is_empty());
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
        };
        let queue: Vec<Candidate> = (0..1000)
            .map(|i| cand(i, &format!("p{i}"), &format!("ns{}", i % 500), i % 7))
            .collect();
        let picks = NamespacePacker.pack(&c, &RunningSet::new(), &queue);
        assert_eq!(picks.len(), 900);
    }
}
