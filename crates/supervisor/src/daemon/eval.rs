//! The EVAL: reap → fire due schedule occurrences → pack → claim → spawn → cancel. (Recovery
//! and adoption run before the first EVAL and again until they succeed; see
//! [`super::recover`].)
//!
//! Decisions and effects are cut where the code allows it:
//! - [`reap`] settles the shims that exited and decides their transitions (from the run files);
//! - [`eval_blocking`] writes them, fires schedules, ends queued runs of removed projects, packs
//!   the merged running set against the queue heads and claims the picks;
//! - [`Daemon::eval`] runs both on a blocking thread, then applies the outcome to the slot pool,
//!   starts the shims of the claims ([`super::spawn`]) and signals cancels ([`super::cancel`]).
//!
//! Every database call of an EVAL happens on a blocking thread (`spawn_blocking`), never on the
//! runtime, and its writes are batched: one transaction for all the transitions it reaps, one
//! for all the claims it makes. An EVAL must never start a shim before its claim is committed
//! (a run still `queued` while its shim starts could be handed out twice), and a packer must
//! never see the slot pool alone — only its merge with the DB running set.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use packer::{merge, packer_for, Candidate, Caps, RunningSet};
use store::{
    now_ms, Applied, ClaimRequest, Millis, QueueHead, Run, RunId, RunStatus, Store, StoreError,
    Transition,
};
use tokio::time::Instant;

use super::cancel::signal_cancelled;
use super::spawn::watch_lock;
use super::state::Daemon;
use crate::config::Config;
use crate::retry::RetryPolicy;
use crate::settle::{self, Fate};
use crate::shim::rundir::RunDir;

/// What the blocking half of an EVAL hands back.
#[derive(Default)]
pub struct EvalOutcome {
    /// Transitions written, by run.
    pub applied: Vec<(RunId, Applied)>,
    /// Runs claimed (status `starting`, committed): the caller must start a shim for each.
    pub claimed: Vec<Run>,
    /// The DB running set after the claims.
    pub db_active: Vec<Run>,
    /// The earliest not-before of a delayed queued run (milliseconds since the epoch, UTC).
    pub next_not_before: Option<Millis>,
    /// The earliest next schedule occurrence (milliseconds since the epoch, UTC).
    pub next_occurrence: Option<Millis>,
    /// The error that stopped the EVAL, with the transitions still to be written.
    pub failed: Option<(StoreError, Vec<Transition>)>,
}

/// What the reap decided about the shims that exited.
struct Reaped {
    /// The transitions their run files call for.
    transitions: Vec<Transition>,
    /// Shims whose run files could not be read: looked at again at the next EVAL.
    unreadable: Vec<(RunId, u64)>,
    /// Shims whose report pipe ended while their lock is still held: waited for.
    still_locked: Vec<(RunId, u64)>,
}

/// What the reap needs to know about a slot: its claim's token, its attempt, its retry policy.
type SlotView = (u64, u32, RetryPolicy);

impl Daemon {
    /// One EVAL. A store error leaves what is still unwritten in [`Daemon::pending`] and sets a
    /// backoff; a fenced write (a newer daemon took the state directory over) sets
    /// [`Daemon::fenced`], and the loop stops.
    pub(super) async fn eval(&mut self) {
        let exited = std::mem::take(&mut self.exited);
        let mut batch = std::mem::take(&mut self.pending);
        let slots: BTreeMap<RunId, SlotView> = self
            .slots
            .iter()
            .map(|s| {
                let policy = RetryPolicy::for_project(&self.config, &s.project);
                (s.run_id, (s.token, s.attempt, policy))
            })
            .collect();
        let live = self.slots.running_set();
        let sweep_removed = self.sweep_removed;
        let config = self.config.clone();
        let store = self.store.clone();
        let state = self.state.clone();
        let epoch = self.epoch;

        let (outcome, unreadable, still_locked) = tokio::task::spawn_blocking(move || {
            let now = now_ms();
            let reaped = reap(state.root(), exited, &slots, now);
            batch.extend(reaped.transitions);
            fail::fail_point!("daemon-before-finalize", |_| std::process::abort());
            (
                eval_blocking(&store, epoch, &config, batch, live, sweep_removed, now),
                reaped.unreadable,
                reaped.still_locked,
            )
        })
        .await
        .expect("EVAL panicked");
        fail::fail_point!("daemon-after-finalize", |_| std::process::abort());

        self.exited.extend(unreadable);
        for (run_id, token) in still_locked {
            watch_lock(self.state.root(), run_id, token, self.events.clone());
        }
        self.forget_ended(&outcome.applied).await;
        if let Some((err, unapplied)) = outcome.failed {
            self.failed(err, unapplied);
            return;
        }
        self.backoff = None;
        self.sweep_removed = false;
        let next = match (outcome.next_not_before, outcome.next_occurrence) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.next_due = next.map(|at| {
            let ms = (at - now_ms()).max(0) as u64;
            Instant::now() + Duration::from_millis(ms)
        });

        for run in outcome.claimed {
            self.spawn(run);
        }
        signal_cancelled(&mut self.slots, self.state.root(), &outcome.db_active);
    }

    /// Removes from the slot pool the runs whose transition left them past active (ended, or
    /// queued again), and those the database already holds past it.
    async fn forget_ended(&mut self, applied: &[(RunId, Applied)]) {
        for (run_id, applied) in applied {
            match applied {
                Applied::Done { status, retry } => {
                    if status.is_terminal() || *status == RunStatus::Queued {
                        self.slots.remove(*run_id);
                    }
                    if let Some(r) = retry {
                        tracing::info!(run = run_id, retry = r, "queued a retry");
                    }
                }
                Applied::Skipped(why) => {
                    tracing::debug!(run = run_id, why, "transition skipped");
                    // The database already holds this run past it: nothing to supervise.
                    if let Ok(run) = self.store_get(*run_id).await {
                        if !run.status.is_active() {
                            self.slots.remove(*run_id);
                        }
                    }
                }
            }
        }
    }

    /// After a store error: keep what is unwritten for the next EVAL and back off (100 ms,
    /// doubling up to 5 s) — or, when fenced off, stop for good.
    fn failed(&mut self, err: StoreError, unapplied: Vec<Transition>) {
        if let StoreError::Fenced { .. } = err {
            // Another daemon took the state directory over: this one must not write again.
            tracing::error!(error = %err, "fenced off: stopping");
            self.fenced = Some(err);
            return;
        }
        self.pending = unapplied;
        let wait = self
            .backoff
            .map(|(_, w)| (w * 2).min(Duration::from_secs(5)))
            .unwrap_or(Duration::from_millis(100));
        tracing::warn!(error = %err, retry_in = ?wait, "EVAL could not finish; retrying later");
        self.backoff = Some((Instant::now() + wait, wait));
    }

    async fn store_get(&self, id: RunId) -> Result<Run, StoreError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.get_run(id))
            .await
            .expect("get_run panicked")
    }
}

/// The reap (blocking: reads run folders under `state_dir`, may write a tombstone): settles each
/// shim in `exited` whose claim is still the one in `slots`, and decides its transition (retry
/// instants from `now`, milliseconds since the epoch, UTC). Exits of an older claim, or of a run
/// no longer supervised, are ignored.
fn reap(
    state_dir: &Path,
    exited: Vec<(RunId, u64)>,
    slots: &BTreeMap<RunId, SlotView>,
    now: Millis,
) -> Reaped {
    let mut out = Reaped {
        transitions: Vec::new(),
        unreadable: Vec::new(),
        still_locked: Vec::new(),
    };
    for (run_id, token) in exited {
        let Some(&(slot_token, attempt, policy)) = slots.get(&run_id) else {
            continue;
        };
        if slot_token != token {
            continue;
        }
        let dir = RunDir::new(state_dir, run_id);
        match settle::settle(&dir, token) {
            // The shim's report pipe can reach end-of-file an instant before the kernel drops
            // its lock (a crashed shim's descriptors close in order): wait for the lock, as for
            // an adopted run.
            Ok(Fate::Alive) => out.still_locked.push((run_id, token)),
            Ok(f) => {
                out.transitions
                    .extend(settle::transition(run_id, token, attempt, &f, policy, now));
            }
            Err(e) => {
                tracing::error!(run = run_id, error = %e, "cannot read the run's files; will look again");
                out.unreadable.push((run_id, token));
            }
        }
    }
    out
}

/// The blocking half of an EVAL: write the reaped transitions (`batch`), fire due schedule
/// occurrences, end queued runs of projects no longer in `config` (all of them when
/// `sweep_removed`), read the DB running set, pack `merge(live, DB running set)` against the
/// queue heads, and claim the picks (committed before it returns). `live` is the slot pool's
/// running set; `now` is milliseconds since the epoch, UTC.
///
/// Blocks on SQLite: call it on a blocking thread. Public so that the EVAL-cost bench
/// (`benches/eval.rs`) measures this very code. Never returns an error: a store error stops it
/// and is handed back in [`EvalOutcome::failed`], with what is still unwritten.
pub fn eval_blocking(
    store: &Store,
    epoch: i64,
    config: &Config,
    batch: Vec<Transition>,
    mut live: RunningSet,
    sweep_removed: bool,
    now: Millis,
) -> EvalOutcome {
    let mut out = EvalOutcome::default();
    if !batch.is_empty() {
        match store.apply(epoch, &batch, now) {
            Ok(applied) => {
                live = without_ended(live, &batch, &applied);
                out.applied = batch.iter().map(|t| t.run_id).zip(applied).collect();
            }
            Err(e) => {
                out.failed = Some((e, batch));
                return out;
            }
        }
    }
    if let Err(e) = pack_and_claim(store, epoch, config, &live, sweep_removed, now, &mut out) {
        out.failed = Some((e, Vec::new()));
    }
    out
}

/// The pool's running set without the runs a written transition took out of the database's:
/// gone from the one, gone from the other.
fn without_ended(live: RunningSet, batch: &[Transition], applied: &[Applied]) -> RunningSet {
    let mut live = live;
    for (t, a) in batch.iter().zip(applied) {
        if let Applied::Done { status, .. } = a {
            if !status.is_active() {
                live = live
                    .iter()
                    .filter(|r| r.run_id != t.run_id)
                    .cloned()
                    .collect();
            }
        }
    }
    live
}

/// Fire → sweep → pack → claim, filling `out` as it goes (see [`eval_blocking`]).
fn pack_and_claim(
    store: &Store,
    epoch: i64,
    config: &Config,
    live: &RunningSet,
    sweep_removed: bool,
    now: Millis,
    out: &mut EvalOutcome,
) -> Result<(), StoreError> {
    // Delays set by a clock that has since stepped back are counted again from now.
    crate::clock::rebase_delays(store, epoch, now)?;
    // Fire due schedule occurrences before packing, so a fired run can start in this EVAL.
    out.next_occurrence = crate::schedule::fire_due(store, epoch, config, now)?;
    // Queued runs of projects no longer in the config can never start: end them, visibly.
    // All queued projects are swept after a config change (and at startup); between
    // changes, a queue head naming an unknown project (queued by a command that read
    // another config) is caught below.
    if sweep_removed {
        for project in store.queued_projects()? {
            if !config.projects.contains_key(&project) {
                cancel_removed(store, &project, now)?;
            }
        }
    }
    let db = store.active_runs()?;
    let persisted: RunningSet = db
        .iter()
        .map(|r| packer::ActiveRun {
            run_id: r.id,
            project: r.project.clone(),
            namespace: r.namespace.clone(),
        })
        .collect();
    // The packers see the merge, never the pool alone: after a restart the pool is empty while
    // the database still lists what is in flight.
    let running = merge(live, &persisted);
    let caps = config.caps();
    let heads = store.queue_heads(now)?;
    for h in heads
        .iter()
        .filter(|h| !config.projects.contains_key(&h.project))
    {
        cancel_removed(store, &h.project, now)?;
    }
    let candidates = candidates(heads, config);
    let picks = packer_for(&caps).pack(&caps, &running, &candidates);
    out.db_active = db;
    // Read before the claim: once runs are claimed, nothing may stop them being spawned.
    out.next_not_before = store.next_not_before(now)?;
    if !picks.is_empty() {
        let claimed = store.claim(epoch, &claim_requests(&picks, &caps), now)?;
        for c in &claimed {
            out.db_active.push(c.run.clone());
        }
        out.claimed = claimed.into_iter().map(|c| c.run).collect();
    }
    Ok(())
}

/// The queue heads the packers may pick from: those of projects in `config`, each counted
/// against the namespace the config gives it now (not the one recorded at enqueue).
fn candidates(heads: Vec<QueueHead>, config: &Config) -> Vec<Candidate> {
    heads
        .into_iter()
        .filter_map(|h| {
            let project = config.projects.get(&h.project)?;
            Some(Candidate {
                run_id: h.run_id,
                project: h.project,
                namespace: project.namespace.clone(),
                priority: h.priority,
            })
        })
        .collect()
}

/// The claims for the packers' picks, each carrying the caps the database checks it against
/// (the namespace cap only when the config declares namespaces).
fn claim_requests(picks: &[Candidate], caps: &Caps) -> Vec<ClaimRequest> {
    picks
        .iter()
        .map(|c| ClaimRequest {
            run_id: c.run_id,
            namespace: c.namespace.clone(),
            global_cap: caps.global as u32,
            namespace_cap: if caps.namespaces.is_empty() {
                None
            } else {
                caps.namespaces
                    .get(&c.namespace)
                    .map(|n| n.max_concurrency as u32)
            },
        })
        .collect()
}

/// Ends the queued runs of a project that is not in the config ("project removed").
fn cancel_removed(store: &Store, project: &str, now: Millis) -> Result<(), StoreError> {
    let n = store.cancel_queued_of(project, "project removed", now)?;
    tracing::info!(
        project,
        runs = n,
        "cancelled queued runs of a removed project"
    );
    Ok(())
}
