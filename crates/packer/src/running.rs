//! The running set: the active runs keyed by project, and [`merge`], which builds the one running
//! set every packer must read from the in-memory slot pool and the DB running set.
//!
//! This module only describes what is running; it never decides what starts, and, like the whole
//! crate, it does no I/O: the daemon reads the slot pool and the database and hands both in.

use std::collections::BTreeMap;

/// The id of a run, as the store assigns it (SQLite `INTEGER PRIMARY KEY`, so an `i64`).
///
/// Ids grow with insertion, which is why a lower id means "queued earlier" in
/// [`queue_order`](crate::queue_order).
pub type RunId = i64;

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
    #[cfg(test)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::active;

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
}
