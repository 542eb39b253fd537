//! One simulated daemon: the daemon's own decisions ([`supervisor::core`] and
//! [`supervisor::daemon::eval_blocking`]) driven in the order its loop drives them, with the
//! world's processes in place of real ones. Its memory is all a crash loses: a new
//! [`Daemon`] starts from the store and the run files, as after SIGKILL.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use config::Config;
use store::{ClaimRequest, Millis, Place, Run, RunId, Store, StoreError, Transition};
use supervisor::boot::Boots;
use supervisor::core::cancel::signal_cancelled;
use supervisor::core::reap::{reap, SlotView};
use supervisor::core::recovery::{self, adopted_slot};
use supervisor::core::slots::{release_ended, shim_done_with};
use supervisor::daemon::{claim_packed, eval_until_claim, ClaimBackoff, EvalGates, EvalOutcome};
use supervisor::retry::RetryPolicy;
use supervisor::schedule::FireBackoff;
use supervisor::slots::{Slot, SlotPool};

use crate::world::World;

/// A simulated daemon's memory.
pub struct Daemon {
    /// Its epoch: every write is fenced with it.
    pub epoch: i64,
    /// The config it runs with.
    pub config: Arc<Config>,
    /// The runs it supervises.
    pub slots: SlotPool,
    /// Transitions decided, not yet written.
    pending: Vec<Transition>,
    /// Shims that reported their end since the last EVAL.
    exited: Vec<(RunId, u64)>,
    fire_backoff: FireBackoff,
    claim_backoff: ClaimBackoff,
    /// An EVAL packed, its claim not yet made: the next EVAL step makes it (other steps, other
    /// hosts' claims among them, may come between).
    packed: Option<(EvalOutcome, Vec<ClaimRequest>)>,
    /// A config read while an EVAL was between its packing and its claim: the real daemon
    /// reloads between EVALs only, so it comes into force at the next.
    reloaded: Option<Arc<Config>>,
}

/// Why an EVAL did not finish.
#[derive(Debug)]
pub enum Stopped {
    /// The database failed (busy, say): what was not written waits for the next EVAL.
    Failed(StoreError),
    /// The daemon crashed between two of its effects (its memory is gone), after the EVAL's
    /// writes: what they did, for the invariants.
    Crashed(Box<Evaluated>),
    /// A newer daemon took over: this one must stop.
    Fenced,
}

/// What one EVAL did, for the invariants.
#[derive(Debug, Default)]
pub struct Evaluated {
    /// The runs it claimed, as the claim left their rows.
    pub claimed: Vec<Run>,
    /// The runs whose end it wrote (their rows after it).
    pub ended: Vec<Run>,
}

impl Daemon {
    /// A daemon starts: it takes the state directory over (a new epoch) and recovers what the
    /// one before it left — adopting the runs whose shim holds the lock, deciding the fate of
    /// the others from their files.
    ///
    /// `place`: where it runs (its machine and state directory), on a shared database. `boot`:
    /// which boot of its machine this is (the kernel's boot id, as the simulation names it).
    ///
    /// Errors: the database's, or the boot file's, in words.
    pub fn start(
        store: &Store,
        state_dir: &Path,
        place: Option<&Place>,
        boot: u32,
        config: Arc<Config>,
        now: Millis,
        world: &mut World,
    ) -> Result<Daemon, String> {
        let caps = supervisor::caps::caps_json(&config);
        let epoch = store
            .take_over_from(&config.host, place, 1, "fleet.toml", &caps, now)
            .map_err(|e| e.to_string())?;
        let boots = Boots::take_in(state_dir, epoch, Some(format!("fleet-sim-boot-{boot}")))
            .map_err(|e| format!("the simulated boot file: {e}"))?;
        let active = store
            .active_rows_here(&config.host, epoch)
            .map_err(|e| e.to_string())?;
        let found = recovery::settle_runs(&active.runs, state_dir, &boots);
        let mut slots = SlotPool::new();
        for (run, shim) in &found.adopt {
            slots.insert(adopted_slot(run, *shim));
            world.adopt(run.id, run.claim_token, epoch);
        }
        // A live shim of a run the database does not hold as active here: its seats are held
        // until it ends, as the daemon's recovery holds them.
        let active_ids = active.runs.iter().map(|r| r.id).collect();
        for unrecorded in
            recovery::unrecorded(store, state_dir, &active_ids).map_err(|e| e.to_string())?
        {
            if let recovery::Unrecorded::Row(mut run, token, shim) = unrecorded {
                run.claim_token = token;
                slots.insert(adopted_slot(&run, Some(shim)));
                world.adopt(run.id, token, epoch);
            }
        }
        let mut pending = found.transitions;
        pending.extend(recovery::transitions(&config, found.settled, now));
        // Run files the simulation writes can always be read: a run left unsettled is the
        // daemon's to settle again later, as the real one does; here it waits in `exited`.
        let exited = found.unsettled;
        Ok(Daemon {
            epoch,
            config,
            slots,
            pending,
            exited,
            fire_backoff: FireBackoff::default(),
            claim_backoff: ClaimBackoff::default(),
            packed: None,
            reloaded: None,
        })
    }

    /// The daemon reloads its fleet.toml: the config comes into force now, or after the claim
    /// of an EVAL that has packed.
    pub fn reload(&mut self, config: Arc<Config>) {
        if self.packed.is_some() {
            self.reloaded = Some(config);
        } else {
            self.config = config;
            self.reloaded = None;
        }
    }

    /// A shim reported that its command started.
    pub fn shim_running(&mut self, run: RunId, token: u64, pid: i32) {
        if let Some(slot) = self.slots.get_mut(run).filter(|s| s.token == token) {
            slot.command_pid = Some(pid);
        }
        self.pending.push(Transition {
            run_id: run,
            token,
            change: store::Change::Running { pid: Some(pid) },
        });
    }

    /// A shim is gone: the next EVAL reaps it.
    pub fn shim_exited(&mut self, run: RunId, token: u64) {
        self.exited.push((run, token));
    }

    /// Whether anything waits to be written, reaped or claimed.
    pub fn has_work(&self) -> bool {
        !self.pending.is_empty() || !self.exited.is_empty() || self.packed.is_some()
    }

    /// One EVAL, as the daemon's: reap, write, fire, pack, claim (committed), then its effects
    /// — a shim started for each claim, SIGTERM to the shims of cancelled runs. Before each
    /// effect `crash` may say the daemon dies there.
    ///
    /// `split`: the EVAL stops once it has packed, and its claim is made by the next call
    /// (which does only that), so that other steps come between the two as other hosts' and
    /// commands' writes may between a real daemon's read and its claim.
    ///
    /// Errors: [`Stopped`].
    pub fn eval(
        &mut self,
        store: &Store,
        state_dir: &Path,
        now: Millis,
        world: &mut World,
        crash: &mut dyn FnMut() -> bool,
        split: bool,
    ) -> Result<Evaluated, Stopped> {
        if let Some((outcome, requests)) = self.packed.take() {
            return self.claim(
                store,
                state_dir,
                now,
                world,
                crash,
                outcome,
                &requests,
                Evaluated::default(),
            );
        }
        if let Some(config) = self.reloaded.take() {
            self.config = config;
        }
        let exited = std::mem::take(&mut self.exited);
        let mut batch = std::mem::take(&mut self.pending);
        let view: BTreeMap<RunId, SlotView> = self
            .slots
            .iter()
            .map(|s| {
                let policy = RetryPolicy::for_project(&self.config, &s.project);
                (s.run_id, (s.token, s.attempt, policy, s.command_pid))
            })
            .collect();
        let live = self.slots.running_set();
        let mut reaped = reap(state_dir, exited, &view, now);
        batch.append(&mut reaped.transitions);
        let gates = EvalGates {
            sweep_removed: false,
            fire_schedules: true,
            claim: true,
            config_version: None,
        };
        let (mut outcome, requests) = eval_until_claim(
            store,
            self.epoch,
            &self.config,
            batch,
            live,
            gates,
            &mut self.fire_backoff,
            &mut self.claim_backoff,
            now,
        );
        self.exited.extend(
            reaped
                .unreadable
                .into_iter()
                .map(|(id, token, _)| (id, token)),
        );
        // A pipe that ended while the lock is still held: followed through the lock.
        for (run, token) in reaped.still_locked {
            world.adopt(run, token, self.epoch);
        }
        let mut evaluated = Evaluated::default();
        for (_, applied) in &outcome.applied {
            if let store::Applied::Done { status, run, .. } = applied {
                if status.is_terminal() {
                    evaluated.ended.push((**run).clone());
                }
            }
        }
        for (run_id, _why) in release_ended(&mut self.slots, &outcome.applied) {
            let status = match store.get_run(run_id) {
                Ok(run) => Some(Some(run.status)),
                Err(StoreError::UnknownRun(_)) => Some(None),
                Err(_) => None,
            };
            if shim_done_with(&self.slots, run_id, status, state_dir, &|s| world.alive(s)) {
                self.slots.remove(run_id);
            }
        }
        if let Some((err, mut unapplied)) = outcome.failed {
            if matches!(err, StoreError::Fenced { .. }) {
                return Err(Stopped::Fenced);
            }
            unapplied.append(&mut outcome.refused);
            self.pending = unapplied;
            return Err(Stopped::Failed(err));
        }
        // The simulated database refuses no row: anything refused is tried again next time.
        self.pending.append(&mut outcome.refused);
        if split && !requests.is_empty() {
            self.packed = Some((outcome, requests));
            return Ok(evaluated);
        }
        self.claim(
            store, state_dir, now, world, crash, outcome, &requests, evaluated,
        )
    }

    /// The claim of an EVAL that has packed (`requests`, with what it read in `outcome`), then
    /// its effects.
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &mut self,
        store: &Store,
        state_dir: &Path,
        now: Millis,
        world: &mut World,
        crash: &mut dyn FnMut() -> bool,
        mut outcome: EvalOutcome,
        requests: &[ClaimRequest],
        mut evaluated: Evaluated,
    ) -> Result<Evaluated, Stopped> {
        claim_packed(
            store,
            self.epoch,
            requests,
            &mut self.claim_backoff,
            now,
            &mut outcome,
        );
        if let Some((err, _)) = outcome.failed {
            if matches!(err, StoreError::Fenced { .. }) {
                return Err(Stopped::Fenced);
            }
            // Nothing was claimed: the next EVAL packs again.
            return Err(Stopped::Failed(err));
        }
        evaluated.claimed = outcome.claimed.clone();
        for run in outcome.claimed {
            if crash() {
                return Err(Stopped::Crashed(Box::new(evaluated)));
            }
            let shim = world.spawn(run.id, run.claim_token, self.epoch);
            self.slots.insert(Slot {
                run_id: run.id,
                project: run.project.clone(),
                namespace: run.namespace.clone(),
                token: run.claim_token,
                attempt: run.attempt,
                shim: Some(shim),
                command_pid: None,
                cancel_sent: false,
                shim_moved_on: false,
                adopted: false,
            });
        }
        if crash() {
            return Err(Stopped::Crashed(Box::new(evaluated)));
        }
        signal_cancelled(
            &mut self.slots,
            state_dir,
            &outcome.db_active,
            &mut |shim, _signal| world.signal(shim),
        );
        Ok(evaluated)
    }
}
