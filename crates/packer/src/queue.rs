//! The queue side of a packer's input: [`Candidate`], a queued run that may be started, and
//! [`queue_order`], the order candidates are considered in.
//!
//! It also holds `heads`, the crate-private first step every packer takes: the best candidate of
//! each project not already running. Taking it here, before any packer rule, keeps "at most one
//! run per project per pick, and the best one" true for every packer by construction. This module
//! never looks at caps; that is the packers' part.

use std::cmp::Ordering;
use std::collections::HashSet;

use crate::{RunId, RunningSet};

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

/// The candidates any packer may consider, in queue order: the best candidate of each project that
/// is not in `running`. O(Q log Q).
///
/// Taking the best per project *before* any namespace rule keeps "at most one run per project per
/// pick, and the best one" true by construction, whatever the packer does next.
pub(crate) fn heads<'q>(running: &RunningSet, queue: &'q [Candidate]) -> Vec<&'q Candidate> {
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
}
