//! Startup recovery: before the first EVAL, settle every run the database records as active,
//! which a previous daemon left behind.
//!
//! Alive ⇒ adopt (into the slot pool, counted against every cap, followed through its lock);
//! ended ⇒ its real status; never started ⇒ tombstone and requeue; unknown ⇒ lost (retried if
//! attempts remain). Run files the database does not hold as active are reported, never acted on.
//!
//! Nothing may be claimed before recovery has run to the end: the loop retries it, with backoff,
//! until it has. A run whose files could not be read (or its tombstone written) stays active and
//! is settled again, with backoff, until it is ([`Unsettled`]). This module must never start a shim nor decide a fate itself (that is
//! [`crate::settle`]'s), and writes to the database only through [`Daemon::pending`].

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use store::{now_ms, Millis, Run, RunId, RunStatus, Store, StoreError, Transition};
use tokio::time::Instant;

use super::spawn::watch_lock;
use super::state::Daemon;
use crate::config::Config;
use crate::retry::RetryPolicy;
use crate::settle::{self, Fate};
use crate::shim::rundir::RunDir;
use crate::slots::{ShimIdentity, Slot};

/// What recovery decided, before any of it is applied.
struct Recovery {
    /// Runs whose shim is alive, to adopt, with the shim when its started record names it.
    adopt: Vec<(Run, Option<ShimIdentity>)>,
    /// Transitions to write: the fates of the others, and `running` for adopted runs the
    /// database still has as `starting`.
    transitions: Vec<Transition>,
    /// Runs whose files could not be read or written: (run, claim token).
    unsettled: Vec<(RunId, u64)>,
}

/// Active runs recovery could not settle: their run files could not be read, or a tombstone
/// could not be written (a full disk, say). They stay active in the database — counted against
/// every cap through the DB running set, although no slot holds them — and are settled again,
/// with backoff, until they are: a failed read or write may delay a run's fate, never fix it.
#[derive(Debug, Default)]
pub(super) struct Unsettled {
    /// (run, claim token) of each.
    runs: Vec<(RunId, u64)>,
    /// When to try again, and the wait that led there (it doubles, up to [`RESETTLE_MAX`]).
    retry: Option<(Instant, Duration)>,
}

impl Unsettled {
    /// When the next attempt is due, if any run waits for one.
    pub(super) fn due(&self) -> Option<Instant> {
        self.retry.map(|(at, _)| at)
    }
}

/// The first wait before runs recovery could not settle are settled again.
const RESETTLE_FIRST: Duration = Duration::from_millis(200);
/// The longest wait between two attempts.
const RESETTLE_MAX: Duration = Duration::from_secs(5);

impl Daemon {
    /// Runs startup recovery and applies what it decided. On a database error nothing is
    /// applied, [`Daemon::recovered`] stays false and a backoff is set; the loop calls this again.
    pub(super) async fn recover(&mut self) {
        let store = self.store.clone();
        let state = self.state.clone();
        let config = self.config.clone();
        let result = tokio::task::spawn_blocking(move || {
            settle_active(&store, state.root(), &config, now_ms())
        })
        .await
        .expect("recovery panicked");
        match result {
            Ok(Recovery {
                adopt,
                transitions,
                unsettled,
            }) => {
                self.adopt(adopt);
                fail::fail_point!("recovery-before-apply", |_| std::process::abort());
                self.pending.extend(transitions);
                self.keep_unsettled(unsettled, None);
                self.recovered = true;
                self.backoff = None;
            }
            Err(e) => {
                let wait = self
                    .backoff
                    .map(|(_, w)| (w * 2).min(Duration::from_secs(5)))
                    .unwrap_or(Duration::from_millis(200));
                tracing::error!(error = %e, retry_in = ?wait, "recovery could not read the database; retrying");
                self.backoff = Some((Instant::now() + wait, wait));
            }
        }
    }

    /// Settles again, once their retry is due, the runs recovery could not settle (see
    /// [`Unsettled`]), and applies what it decides as recovery does. Does nothing before then.
    pub(super) async fn resettle(&mut self) {
        let Some((at, wait)) = self.unsettled.retry else {
            return;
        };
        if Instant::now() < at {
            return;
        }
        let wanted = self.unsettled.runs.clone();
        let store = self.store.clone();
        let state = self.state.clone();
        let config = self.config.clone();
        let result = tokio::task::spawn_blocking(move || {
            // Only those still active under the same claim: anything else has moved on.
            let runs: Vec<Run> = store
                .active_runs()?
                .into_iter()
                .filter(|r| wanted.contains(&(r.id, r.claim_token)))
                .collect();
            Ok::<_, StoreError>(settle_runs(&runs, state.root(), &config, now_ms()))
        })
        .await
        .expect("settling again panicked");
        match result {
            Ok(Recovery {
                adopt,
                transitions,
                unsettled,
            }) => {
                self.adopt(adopt);
                self.pending.extend(transitions);
                self.keep_unsettled(unsettled, Some(wait));
            }
            Err(e) => {
                let runs = std::mem::take(&mut self.unsettled.runs);
                tracing::error!(error = %e, "could not read the database to settle runs again");
                self.keep_unsettled(runs, Some(wait));
            }
        }
    }

    /// Puts the runs whose shim is alive in the slot pool, and follows each through its lock.
    fn adopt(&mut self, adopt: Vec<(Run, Option<ShimIdentity>)>) {
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
    }

    /// Records the runs still unsettled, and when to try again: `last` is the wait before this
    /// attempt (`None` after the first one), doubled up to [`RESETTLE_MAX`].
    fn keep_unsettled(&mut self, runs: Vec<(RunId, u64)>, last: Option<Duration>) {
        if runs.is_empty() {
            self.unsettled = Unsettled::default();
            return;
        }
        let wait = last.map_or(RESETTLE_FIRST, |w| (w * 2).min(RESETTLE_MAX));
        tracing::warn!(
            runs = ?runs.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            retry_in = ?wait,
            "runs left active: their files could not be read or written; settling them again later"
        );
        self.unsettled = Unsettled {
            runs,
            retry: Some((Instant::now() + wait, wait)),
        };
    }
}

/// Settles every run the database records as active (blocking: reads the database and the run
/// folders under `state_dir`, and writes tombstones). `now` is milliseconds since the epoch, UTC,
/// for retry instants.
///
/// Errors: the database cannot be read. A run whose files cannot be read (or whose tombstone
/// cannot be written) is logged and left active, in [`Recovery::unsettled`].
fn settle_active(
    store: &Store,
    state_dir: &Path,
    config: &Config,
    now: Millis,
) -> Result<Recovery, StoreError> {
    let active = store.active_runs()?;
    let recovery = settle_runs(&active, state_dir, config, now);
    report_unrecorded_shims(state_dir, &active);
    Ok(recovery)
}

/// Settles each of `runs` (active runs a previous daemon left) from its run files: see
/// [`settle_active`].
fn settle_runs(runs: &[Run], state_dir: &Path, config: &Config, now: Millis) -> Recovery {
    let mut adopt = Vec::new();
    let mut transitions = Vec::new();
    let mut unsettled = Vec::new();
    for run in runs {
        let dir = RunDir::new(state_dir, run.id);
        let fate = match settle::settle(&dir, run.claim_token) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(run = run.id, error = %e, "cannot read or write the run's files; leaving it active");
                unsettled.push((run.id, run.claim_token));
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
        let policy = RetryPolicy::for_project(config, &run.project);
        tracing::info!(run = run.id, project = %run.project, fate = ?fate, "recovered");
        if let Some(t) =
            settle::transition(run.id, run.claim_token, run.attempt, &fate, policy, now)
        {
            transitions.push(t);
        }
    }
    Recovery {
        adopt,
        transitions,
        unsettled,
    }
}

/// Warns about every live shim (its run's lock held) of a run the database does not record as
/// active. Never acts on one: which of the two is wrong is for an operator to judge, with
/// `fleet check`.
fn report_unrecorded_shims(state_dir: &Path, active: &[Run]) {
    let active_ids: BTreeSet<RunId> = active.iter().map(|r| r.id).collect();
    let Ok(ids) = crate::shim::rundir::list_run_ids(state_dir) else {
        return;
    };
    for id in ids {
        if active_ids.contains(&id) {
            continue;
        }
        if RunDir::new(state_dir, id).is_locked().unwrap_or(false) {
            tracing::warn!(run = id, "a live shim holds a run the database does not record as active; left alone (see `fleet check`)");
        }
    }
}
