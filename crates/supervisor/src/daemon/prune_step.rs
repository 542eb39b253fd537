//! The daemon's share of pruning: now and then, at a turn of the loop (idle or not), a few small batches on a
//! blocking thread (see [`crate::prune`]), then free pages and the write-ahead log given back.
//! The same step makes the state directory private again if its permissions were opened up.
//! At most one step runs at a time; the loop never waits for it.

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::state::Daemon;
use crate::prune;

/// A step starts at most once every this many ticks (30 s with the default 1 s tick).
const TICKS_BETWEEN_STEPS: u32 = 30;

/// The most batches one step runs ([`prune::BATCH`] runs each): a backlog (a first start with
/// years of history, a lowered `keep_runs`) is worked off over several steps, the write lock
/// free between batches.
const BATCHES_PER_STEP: usize = 10;

/// When the last step started, and the one running, if any.
pub(super) struct PruneStep {
    last: Instant,
    running: Option<JoinHandle<()>>,
}

impl PruneStep {
    /// No step before one interval has passed: startup recovery and the first EVALs go first.
    pub(super) fn new() -> PruneStep {
        PruneStep {
            last: Instant::now(),
            running: None,
        }
    }

    /// Starts a step if one is due and none runs.
    pub(super) fn maybe_start(&mut self, daemon: &Daemon) {
        if self.running.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let every = daemon.config.tick * TICKS_BETWEEN_STEPS;
        if self.last.elapsed() < every {
            return;
        }
        self.last = Instant::now();
        let policy = prune::policy(&daemon.config, store::now_ms());
        let root = daemon.state.root().to_path_buf();
        if policy.default.keeps_all() && policy.projects.values().all(|k| k.keeps_all()) {
            self.running = Some(tokio::task::spawn_blocking(move || keep_private(&root)));
            return;
        }
        let store = daemon.store.clone();
        self.running = Some(tokio::task::spawn_blocking(move || {
            keep_private(&root);
            let mut total = 0;
            for _ in 0..BATCHES_PER_STEP {
                match prune::prune_batch(&root, &store, &policy, false) {
                    Ok(p) => {
                        for f in &p.failed {
                            tracing::warn!(run = f.run_id, path = %f.path.display(), error = %f.error, "cannot remove the files of a run to prune; it is kept, the others pruned");
                        }
                        if p.runs.is_empty() {
                            break;
                        }
                        total += p.runs.len();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "pruning ended runs failed; trying again later");
                        break;
                    }
                }
            }
            if total > 0 {
                tracing::info!(runs = total, "pruned ended runs (keep_runs, keep_for)");
            }
            if let Err(e) = store.reclaim_space(prune::RECLAIM_PAGES) {
                tracing::warn!(error = %e, "could not give free database pages back; trying again later");
            }
        }));
    }
}

/// The state directory made private again if someone opened it up while the daemon ran (it is
/// made so at every start too): a `chmod 777` lasts until the next step, not until a restart.
fn keep_private(root: &std::path::Path) {
    for (path, found) in crate::statedir::tighten(root) {
        tracing::warn!(path = %path.display(), found = %format!("{found:o}"), "the state directory's permissions were opened up; made private again");
    }
}
