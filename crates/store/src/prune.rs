//! What pruning asks of the store: which ended runs a retention policy lets go
//! ([`PrunePolicy`], [`crate::Store::prune_candidates`]), forgetting them
//! ([`crate::Store::forget_runs`]) and giving the space back ([`crate::Store::reclaim_space`]).

use std::collections::BTreeMap;

use crate::{Millis, RunId};

/// How many ended runs of one project are kept. A run is let go when either rule says so,
/// never the project's newest ended run that started (its last outcome stays known), never a
/// queued or active run, never a run a queued or active run refers to (`hook_of`, `retry_of`,
/// `rerun_of`) until that run has ended. Runs that started and runs that never did (skipped
/// occurrences, runs cancelled while queued) are counted apart: `newest = N` keeps the newest N
/// of each, so skips never push real outcomes out of history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Keep {
    /// Keep the newest this many ended runs (by id); `None`: no limit by count. At least 1
    /// when set.
    pub newest: Option<u32>,
    /// Let go of ended runs that finished before this instant (UTC ms); `None`: no limit by
    /// age.
    pub finished_after: Option<Millis>,
}

impl Keep {
    /// Whether this keeps every run.
    pub fn keeps_all(&self) -> bool {
        self.newest.is_none() && self.finished_after.is_none()
    }
}

/// The retention policy of a whole database: one [`Keep`] per project, and the one for a
/// project not named (e.g. removed from the config).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrunePolicy {
    /// For projects not in `projects`.
    pub default: Keep,
    /// By project name.
    pub projects: BTreeMap<String, Keep>,
    /// Runs that finished at or after this instant (UTC ms) are never let go, whatever the
    /// rules say: a grace for anything still settling around a run that just ended.
    pub ended_before: Millis,
    /// On a database shared by many hosts, the host pruning: of the runs that started, only
    /// those this host ran (`runs.host`) are let go, since a run's files live on the disk of
    /// the host that ran it and only that host can remove them (files first, then row) and see
    /// whether a shim still holds its lock. Runs that never started have no files anywhere:
    /// any host lets them go. `None` (one host, SQLite): every run, whoever ran it.
    pub host: Option<String>,
}

impl PrunePolicy {
    /// The rule for `project`.
    pub fn keep_for(&self, project: &str) -> Keep {
        self.projects.get(project).copied().unwrap_or(self.default)
    }
}

/// An ended run that the policy lets go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneCandidate {
    /// Its id.
    pub id: RunId,
    /// Its project.
    pub project: String,
    /// When it finished (UTC ms).
    pub finished_at: Millis,
}
