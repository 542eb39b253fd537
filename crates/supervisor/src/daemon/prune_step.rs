//! The daemon's share of pruning: now and then, at a turn of the loop (idle or not), a few small batches on a
//! blocking thread (see [`crate::prune`]), then free pages and the write-ahead log given back.
//! The same step warns when someone has opened the state directory up to other users meanwhile
//! (it changes no mode: fleet never re-permissions a folder).
//! At most one step runs at a time; the loop never waits for it.

use tokio::task::JoinHandle;
use tokio::time::Instant;

use std::sync::{Arc, Mutex};

use super::state::Daemon;
use crate::prune;
use crate::statedir::{Exposed, StateDir};

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
    /// What the last look found open to other users (said once, and once more when it is over).
    exposed: Arc<Mutex<Option<Exposed>>>,
}

impl PruneStep {
    /// No step before one interval has passed: startup recovery and the first EVALs go first.
    pub(super) fn new() -> PruneStep {
        PruneStep {
            last: Instant::now(),
            running: None,
            exposed: Arc::default(),
        }
    }

    /// Starts a step if one is due and none runs.
    pub(super) fn maybe_start(&mut self, daemon: &Daemon) {
        if self.running.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let every = daemon.config.current.tick * TICKS_BETWEEN_STEPS;
        if self.last.elapsed() < every {
            return;
        }
        self.last = Instant::now();
        let policy = prune::policy(&daemon.config.current, store::now_ms());
        let root = daemon.setup.state.root().to_path_buf();
        let state = daemon.setup.state.clone();
        let seen = self.exposed.clone();
        if policy.default.keeps_all() && policy.projects.values().all(|k| k.keeps_all()) {
            self.running = Some(tokio::task::spawn_blocking(move || {
                watch_private(&state, &seen)
            }));
            return;
        }
        let store = daemon.setup.store.clone();
        self.running = Some(tokio::task::spawn_blocking(move || {
            watch_private(&state, &seen);
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

/// Warns when someone opened the state directory (or its `runs/`) up to other users while the
/// daemon runs — a daemon refuses to start on such a folder, and fleet never re-permissions
/// one — once when it is found, and once when it is private again; `seen` is what the last look
/// found.
fn watch_private(state: &StateDir, seen: &Mutex<Option<Exposed>>) {
    let now = state.exposed();
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    if *seen == now {
        return;
    }
    match &now {
        Some(exposed) => tracing::warn!(
            path = %exposed.path.display(),
            mode = %format!("{:04o}", exposed.mode),
            "the state directory was opened up to other users; this daemon goes on, the next one will refuse to start: {exposed}"
        ),
        None => tracing::info!("the state directory is its owner's alone again"),
    }
    *seen = now;
}
