//! The running set: the active runs grouped by project, and [`merge`], which builds the one running
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
    /// The host the run is active on; `None`: the host the packing is for (a run of the slot
    /// pool, or of a database only this host uses). Counted against that host's capacity
    /// ([`HostRules`](crate::HostRules)); every run counts against the global cap wherever it is.
    pub host: Option<String>,
}

/// The active runs, grouped by project.
///
/// A project has at most `max_parallel` active runs (one, unless the config says more): the store
/// enforces it with seats under a unique index, and the packers never pick past it
/// ([`Caps::max_parallel_of`](crate::Caps::max_parallel_of)). This type only records what is
/// active: it holds every run it is given, each once by run id, grouped by project and in id
/// order within a project. `BTreeMap`s keep iteration order deterministic, which keeps every
/// packer deterministic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunningSet {
    by_project: BTreeMap<String, Vec<ActiveRun>>,
}

impl RunningSet {
    /// An empty running set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `run` as an active run of its project. A run with the same id already recorded
    /// for that project is replaced and returned; otherwise `None`. O(k) for a project with k
    /// active runs.
    pub fn insert(&mut self, run: ActiveRun) -> Option<ActiveRun> {
        let runs = self.by_project.entry(run.project.clone()).or_default();
        match runs.binary_search_by_key(&run.run_id, |r| r.run_id) {
            Ok(at) => Some(std::mem::replace(&mut runs[at], run)),
            Err(at) => {
                runs.insert(at, run);
                None
            }
        }
    }

    /// Forgets every active run of `project` and returns them, in id order.
    #[cfg(test)]
    pub fn remove_project(&mut self, project: &str) -> Vec<ActiveRun> {
        self.by_project.remove(project).unwrap_or_default()
    }

    /// Whether `project` has an active run.
    pub fn contains_project(&self, project: &str) -> bool {
        self.by_project.contains_key(project)
    }

    /// The oldest (lowest id) active run of `project`, if any.
    pub fn get(&self, project: &str) -> Option<&ActiveRun> {
        self.by_project.get(project).and_then(|runs| runs.first())
    }

    /// The active runs of `project`, in id order (empty if none).
    pub fn runs_of(&self, project: &str) -> &[ActiveRun] {
        self.by_project.get(project).map_or(&[], Vec::as_slice)
    }

    /// The number of active runs of `project`: the seats of its `max_parallel` it holds.
    pub fn count_of(&self, project: &str) -> usize {
        self.runs_of(project).len()
    }

    /// The number of active runs, over all projects. Every one of them counts against the
    /// global cap, whatever its namespace. O(number of projects).
    pub fn len(&self) -> usize {
        self.by_project.values().map(Vec::len).sum()
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

    /// The number of active runs on the host called `host`: those whose
    /// [`ActiveRun::host`] is that name or `None` (this host). O(len).
    pub fn count_on(&self, host: &str) -> usize {
        self.iter()
            .filter(|r| r.host.as_deref().is_none_or(|h| h == host))
            .count()
    }

    /// The active runs, in project-name order, then id order within a project.
    pub fn iter(&self) -> impl Iterator<Item = &ActiveRun> {
        self.by_project.values().flatten()
    }
}

impl FromIterator<ActiveRun> for RunningSet {
    /// Builds a running set; where several runs share an id and a project, the last one wins
    /// (as with [`RunningSet::insert`]).
    fn from_iter<I: IntoIterator<Item = ActiveRun>>(iter: I) -> Self {
        let mut set = RunningSet::new();
        for run in iter {
            set.insert(run);
        }
        set
    }
}

/// The running set every packer must see: the live slot pool (`live`, the runs this daemon
/// process supervises right now) merged with the DB running set (`persisted`, the runs the
/// database records as `starting` or `running`): every run either one holds, each once by run
/// id.
///
/// A run both hold is counted as the pool records it (its project, namespace and host as this
/// daemon started it), and a run only the database holds as the database records it. Neither
/// side can drop a run of the other:
///
/// - After a restart the slot pool is empty while the database may still record runs in flight
///   (adopted or about to be recovered). A packer that read only the slot pool would see free
///   capacity and start those projects a second time: this is the guard against a double spawn
///   after restart, so the daemon must call `merge` and hand the result to the packer, whichever
///   packer it is.
/// - A run whose row no longer says where it runs (another program moved it back to `queued`,
///   ended it, or moved it to another project, namespace or host while its command runs) is
///   still supervised by the pool, and its command still takes its seat under every cap until
///   its shim is gone. The pool also covers the short window in which it knows of a run whose
///   state change the daemon has not yet read back.
///
/// Counting a run the other side no longer holds can only make the packing start less, never
/// more.
///
/// Cost: O((|live| + |persisted|) log n).
pub fn merge(live: &RunningSet, persisted: &RunningSet) -> RunningSet {
    let mut merged = live.clone();
    let known: std::collections::BTreeSet<RunId> = live.iter().map(|r| r.run_id).collect();
    for run in persisted.iter().filter(|r| !known.contains(&r.run_id)) {
        merged.insert(run.clone());
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::active;

    #[test]
    fn running_set_groups_by_project_and_keeps_each_run_once() {
        let mut set = RunningSet::new();
        assert!(set.is_empty());
        assert_eq!(set.insert(active(2, "p", "a")), None);
        assert_eq!(set.insert(active(1, "p", "b")), None);
        assert_eq!(set.insert(active(2, "p", "c")), Some(active(2, "p", "a")));
        set.insert(active(3, "q", "b"));
        assert_eq!(set.len(), 3);
        assert_eq!(set.count_of("p"), 2);
        assert_eq!(set.count_in("b"), 2);
        assert_eq!(set.count_in("a"), 0);
        assert_eq!(set.get("p"), Some(&active(1, "p", "b")));
        assert_eq!(
            set.remove_project("p"),
            vec![active(1, "p", "b"), active(2, "p", "c")]
        );
        assert!(!set.contains_project("p"));
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn merge_counts_every_run_either_side_holds_once() {
        let live: RunningSet = [
            active(1, "p", "a"),
            active(2, "p", "a"),
            active(3, "l", "a"),
        ]
        .into_iter()
        .collect();
        // Run 2 as the database records it (moved to another namespace by another writer),
        // run 4 only the database knows, and run 3 under another project.
        let db: RunningSet = [
            active(2, "p", "b"),
            active(4, "p", "b"),
            active(3, "q", "b"),
        ]
        .into_iter()
        .collect();
        let merged = merge(&live, &db);
        assert_eq!(
            merged.runs_of("p"),
            &[
                active(1, "p", "a"),
                active(2, "p", "a"),
                active(4, "p", "b")
            ]
        );
        assert_eq!(merged.runs_of("l"), &[active(3, "l", "a")]);
        assert_eq!(merged.count_of("q"), 0);
        assert_eq!(merged.len(), 4);
    }
}
