//! Startup recovery: before the first EVAL, settle every run the database records as active,
//! which a previous daemon left behind.
//!
//! Alive ⇒ adopt (into the slot pool, counted against every cap, followed through its lock);
//! ended ⇒ its real status; never started ⇒ tombstone and requeue; unknown ⇒ lost (retried if
//! attempts remain). Run files the database does not hold as active are reported, never acted on.
//!
//! A run's retry follows its project's settings; for a project the config does not know (it
//! gets none), recovery first makes sure the config is the file's, and waits while an edit of
//! the file settles.
//!
//! Nothing may be claimed before recovery has run to the end: the loop retries it, with backoff,
//! until it has. This module must never start a shim nor decide a fate itself (that is
//! [`crate::settle`]'s), and writes to the database only through [`Daemon::pending`].

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use store::{now_ms, Run, RunId, RunStatus, Store, StoreError, Transition};
use tokio::time::Instant;

use super::follow::watch_lock;
use super::state::Daemon;
use crate::retry::RetryPolicy;
use crate::settle::{self, Fate};
use crate::shim::rundir::RunDir;
use crate::slots::{ShimIdentity, Slot};

/// What recovery found, before any of it is applied.
struct Recovery {
    /// Runs whose shim is alive, to adopt, with the shim when its started record names it.
    adopt: Vec<(Run, Option<ShimIdentity>)>,
    /// `running` for adopted runs the database still has as `starting`.
    transitions: Vec<Transition>,
    /// The other runs and their fates; their transitions (and retries) are decided once the
    /// config is known to be the file's.
    settled: Vec<(Run, Fate)>,
}

impl Daemon {
    /// Runs startup recovery and applies what it decided. On a database error nothing is
    /// applied, [`Daemon::recovered`] stays false and a backoff is set; the loop calls this again.
    pub(super) async fn recover(&mut self) {
        let store = self.store.clone();
        let state = self.state.clone();
        let result = tokio::task::spawn_blocking(move || settle_active(&store, state.root()))
            .await
            .expect("recovery panicked");
        if let Ok(found) = &result {
            // A run of a project the config does not know gets no retry: decide that only on
            // the file as it is now, never on a config older than it.
            let unknown = found
                .settled
                .iter()
                .any(|(r, _)| !self.config.projects.contains_key(&r.project));
            if unknown {
                let view = self.config_view().await;
                if let (false, Some(left)) = (view.usable(), view.settle_left()) {
                    // Nothing was applied; recovery runs again once the file has settled.
                    self.backoff = Some((Instant::now() + left, left));
                    return;
                }
            }
        }
        let config = self.config.clone();
        match result {
            Ok(Recovery {
                adopt,
                mut transitions,
                settled,
            }) => {
                let now = now_ms();
                for (run, fate) in settled {
                    let policy = RetryPolicy::for_project(&config, &run.project);
                    tracing::info!(
                        run = run.id,
                        project = %run.project,
                        fate = %fate.name(),
                        "recovered"
                    );
                    transitions.extend(settle::transition(
                        run.id,
                        run.claim_token,
                        run.attempt,
                        &fate,
                        policy,
                        now,
                    ));
                }
                for (run, shim) in adopt {
                    tracing::info!(run = run.id, project = %run.project, "adopted a live run");
                    self.slots.insert(Slot {
                        run_id: run.id,
                        project: run.project.clone(),
                        namespace: run.namespace.clone(),
                        token: run.claim_token,
                        attempt: run.attempt,
                        shim,
                        cancel_sent: false,
                        adopted: true,
                    });
                    watch_lock(
                        self.state.root(),
                        run.id,
                        run.claim_token,
                        self.events.clone(),
                    );
                }
                fail::fail_point!("recovery-before-apply", |_| std::process::abort());
                self.pending.extend(transitions);
                self.recovered = true;
                self.backoff = None;
            }
            Err(e) => {
                let wait = self
                    .backoff
                    .map(|(_, w)| (w * 2).min(Duration::from_secs(5)))
                    .unwrap_or(Duration::from_millis(200));
                tracing::error!(error = %e, retry_in_ms = wait.as_millis() as u64, "recovery could not read the database; retrying");
                self.backoff = Some((Instant::now() + wait, wait));
            }
        }
    }
}

/// Settles every run the database records as active (blocking: reads the database and the run
/// folders under `state_dir`, and writes tombstones).
///
/// Errors: the database cannot be read. A run whose files cannot be read is logged and left
/// active (the next recovery, or `fleet check`, sees it again).
fn settle_active(store: &Store, state_dir: &Path) -> Result<Recovery, StoreError> {
    let active = store.active_runs()?;
    let mut adopt = Vec::new();
    let mut transitions = Vec::new();
    let mut settled = Vec::new();
    for run in &active {
        let dir = RunDir::new(state_dir, run.id);
        let fate = match settle::settle(&dir, run.claim_token) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(run = run.id, project = %run.project, error = %e, "cannot read the run's files; leaving it active");
                continue;
            }
        };
        if fate == Fate::Alive {
            let started = dir
                .read_started()
                .ok()
                .flatten()
                .filter(|s| s.token == run.claim_token);
            if run.status == RunStatus::Starting {
                if let Some(r) = dir
                    .read_running()
                    .ok()
                    .flatten()
                    .filter(|r| r.token == run.claim_token)
                {
                    transitions.push(Transition {
                        run_id: run.id,
                        token: run.claim_token,
                        change: store::Change::Running { pid: Some(r.pid) },
                    });
                }
            }
            let shim = started.map(|s| ShimIdentity {
                pid: s.shim_pid,
                start_time: s.shim_start_time,
            });
            adopt.push((run.clone(), shim));
            continue;
        }
        settled.push((run.clone(), fate));
    }
    report_unrecorded_shims(state_dir, &active);
    Ok(Recovery {
        adopt,
        transitions,
        settled,
    })
}

/// Warns about every live shim (its run's lock held) of a run the database does not record as
/// active. Never acts on one: which of the two is wrong is for an operator to judge, with
/// `fleet check`.
fn report_unrecorded_shims(state_dir: &Path, active: &[Run]) {
    let active_ids: BTreeSet<RunId> = active.iter().map(|r| r.id).collect();
    let ids = match crate::shim::rundir::list_run_ids(state_dir) {
        Ok(ids) => ids,
        Err(e) => {
            // Not "no shims": unread, which is said.
            let runs = state_dir.join(crate::shim::rundir::RUNS_DIR);
            tracing::warn!(error = %e, path = %runs.display(), "cannot list the run folders; shims the database does not know of go unreported");
            return;
        }
    };
    for id in ids {
        if active_ids.contains(&id) {
            continue;
        }
        match RunDir::new(state_dir, id).is_locked() {
            Ok(true) => tracing::warn!(run = id, "a live shim holds a run the database does not record as active; left alone (see `fleet check`)"),
            Ok(false) => {}
            Err(e) => tracing::warn!(run = id, error = %e, "cannot probe the run's lock; left alone (see `fleet check`)"),
        }
    }
}
