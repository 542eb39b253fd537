//! The queue side of a packer's input: [`Candidate`], a queued run that may be started, and
//! [`queue_order`], the order candidates are considered in.
//!
//! It also holds `heads`, the crate-private first step every packer takes: the best candidates of
//! each project, as many as it has free seats (`max_parallel` minus its active runs). Taking them
//! here, before any packer rule, keeps "never past a project's `max_parallel`, and its best runs
//! first" true for every packer by construction. This module reads no cap but `max_parallel`;
//! the global and namespace caps are the packers' part.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::{Caps, RunId, RunningSet};

/// A queued run that may be started.
///
/// `priority` is the run's priority (higher starts first); `namespace` is the namespace its project
/// is declared in now (use [`DEFAULT_NAMESPACE`](crate::DEFAULT_NAMESPACE) for a project that
/// declares none).
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

/// The candidates any packer may consider, in queue order: of the projects placed on this host
/// ([`Caps::placed_here`]), the best candidates of each project,
/// as many as its free seats (`caps.max_parallel_of(project)` minus its runs in `running`,
/// saturating; one for a project with no `max_parallel` and nothing running). O(Q log Q).
///
/// Taking them per project *before* any namespace rule keeps "never past a project's
/// `max_parallel`, and its best runs first" true by construction, whatever the packer does next.
pub(crate) fn heads<'q>(
    caps: &Caps,
    running: &RunningSet,
    queue: &'q [Candidate],
) -> Vec<&'q Candidate> {
    let mut sorted: Vec<&Candidate> = queue.iter().collect();
    sorted.sort_unstable_by(|a, b| queue_order(a, b));
    // Seats left per project, counted down as its candidates (best first) are taken.
    let mut left: HashMap<&str, usize> = HashMap::new();
    sorted
        .into_iter()
        // Placement first: a project placed only on other hosts takes no seat here.
        .filter(|c| caps.placed_here(&c.project))
        .filter(|c| {
            let seats = left.entry(c.project.as_str()).or_insert_with(|| {
                caps.max_parallel_of(&c.project)
                    .saturating_sub(running.count_of(&c.project))
            });
            if *seats == 0 {
                return false;
            }
            *seats -= 1;
            true
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::testing::{cand, caps, ids};
    use crate::{FallbackPacker, NamespacePacker, Packer, RunningSet};

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
    fn a_project_gets_its_free_seats_best_first() {
        let queue = vec![
            cand(1, "p", "default", 0),
            cand(2, "p", "default", 9),
            cand(3, "p", "default", 0),
            cand(4, "p", "default", 0),
            cand(5, "q", "default", 0),
        ];
        let mut c = caps(10, &[]);
        c.max_parallel.insert("p".into(), 3);
        let running: RunningSet = [crate::testing::active(9, "p", "default")]
            .into_iter()
            .collect();
        // Three seats, one held: the two best of p, then q.
        let picks = FallbackPacker.pack(&c, &running, &queue);
        assert_eq!(ids(&picks), vec![2, 1, 5]);
        c.max_parallel.insert("p".into(), 0);
        let picks = FallbackPacker.pack(&c, &RunningSet::new(), &queue);
        assert_eq!(ids(&picks), vec![5]);
    }
}
