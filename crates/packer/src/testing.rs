//! Builders shared by the unit tests of every module of the crate (compiled for tests only).
//!
//! They only make values; they must never decide anything a test asserts about.

use crate::{ActiveRun, Candidate, Caps, NamespaceCap, RunId};

/// A candidate of `project` in `namespace`.
pub(crate) fn cand(run_id: RunId, project: &str, namespace: &str, priority: i64) -> Candidate {
    Candidate {
        run_id,
        project: project.into(),
        namespace: namespace.into(),
        priority,
    }
}

/// An active run of `project`, started in `namespace`.
pub(crate) fn active(run_id: RunId, project: &str, namespace: &str) -> ActiveRun {
    ActiveRun {
        run_id,
        project: project.into(),
        namespace: namespace.into(),
        host: None,
    }
}

/// The run ids of `picks`, in pick order.
pub(crate) fn ids(picks: &[Candidate]) -> Vec<RunId> {
    picks.iter().map(|c| c.run_id).collect()
}

/// Caps with a `global` cap and the namespaces `ns`, each as `(name, max_concurrency, weight)`.
pub(crate) fn caps(global: usize, ns: &[(&str, usize, u32)]) -> Caps {
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
        max_parallel: Default::default(),
        host: Default::default(),
    }
}
