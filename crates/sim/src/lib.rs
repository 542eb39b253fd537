//! fleet-sim: the daemon's decisions run in a simulated world, one seeded step at a time, with
//! faults injected between any two of them and fleet's invariants checked after every step
//! against the world's own truth.
//!
//! What is real: the store (SQLite, on tmpfs when there is one), the run files (written and
//! read through `runrecord`, as the shims and the daemon do), and every decision — recovery's
//! ([`supervisor::core::recovery`]), the reap's ([`supervisor::core::reap`]), the EVAL's
//! database half ([`supervisor::daemon::eval_blocking`]: write the ends, fire schedules, pack,
//! claim), when a slot may go ([`supervisor::core::slots`]) and which shims a cancel reaches
//! ([`supervisor::core::cancel`]). What is simulated: the clock (a number the steps move),
//! the shims and their commands ([`world`]), and the daemon's loop around its decisions
//! ([`host`]), whose memory a crash drops.
//!
//! A step is drawn from a ChaCha8 generator seeded with the run's seed, so a seed replays the
//! same steps. The steps: an EVAL (or, after a crash, a daemon's start and its recovery), a
//! shim taking one step (its command starts, or ends with a random code), an enqueue, time
//! passing, a cancel, a pause or a resume, an edit of the caps, a shim killed, the daemon
//! killed — and, inside an EVAL, the daemon killed between any two of its effects.
//!
//! The invariants ([`check`]): no run's command started twice; no claim made while the
//! world's running commands (and the shims about to start theirs) already fill a cap the claim
//! counts against; a run's terminal status never changes, and says how its command really
//! ended; a queued run whose cancel was accepted never starts; once the faults stop and time
//! passes, every run ends (nothing stays queued or active); and `fleet check`'s audit of the
//! store and the run files finds nothing.

mod check;
pub mod host;
mod shape;
pub mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use config::Config;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use store::{HoldKind, Millis, NewRun, RunFilter, RunId, RunStatus, Store, Trigger};

use host::{Daemon, Stopped};
use shape::{Shape, PROJECTS};
use world::{Follower, Phase, Report, World};

/// How a simulation is run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The seed every step is drawn from.
    pub seed: u64,
    /// How many steps, before the faults stop and the simulation drains.
    pub steps: u64,
}

/// What a simulation did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Steps taken (the drain's included).
    pub steps: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Invariant checks made.
    pub checks: u64,
    /// Runs enqueued (retries included).
    pub runs: u64,
    /// EVALs run.
    pub evals: u64,
    /// Commands started.
    pub starts: u64,
}

impl Summary {
    /// All faults injected.
    pub fn fault_total(&self) -> u64 {
        self.faults.values().sum()
    }
}

/// Why a simulation stopped short.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// An invariant did not hold.
    #[error("step {step}: {what}")]
    Violation {
        /// The step after which it was found (the steps before it are the trace).
        step: u64,
        /// What does not hold.
        what: String,
    },
    /// The simulation's own world could not be set up or written (no fault of fleet's).
    #[error("the simulation could not run: {0}")]
    Setup(String),
}

/// The simulation.
struct Sim {
    rng: ChaCha8Rng,
    /// Holds the state directory's folder for the simulation's life.
    _dir: tempfile::TempDir,
    state_dir: PathBuf,
    config_path: PathBuf,
    store: Store,
    shape: Shape,
    config: Arc<Config>,
    daemon: Option<Daemon>,
    /// The state directory's daemon lock, held while a daemon runs.
    lock: Option<supervisor::statedir::DaemonLock>,
    /// A daemon that stalled (stopped, swapped out) while its lock file was removed and a new
    /// daemon took over: it may still try to write once, and must be refused.
    zombie: Option<Daemon>,
    world: World,
    /// The simulated wall clock (milliseconds since the epoch, UTC).
    now: Millis,
    step: u64,
    summary: Summary,
    checks: check::Checks,
    paused: BTreeSet<(bool, String)>,
    /// Runs enqueued so far (their ids are 1..=this, in order).
    enqueued: Vec<RunId>,
    /// Another program's connection holding the database's write lock (`BEGIN IMMEDIATE`),
    /// and the step it lets go at.
    foreign: Option<(rusqlite::Connection, u64)>,
}

/// Runs one simulation: `options.steps` seeded steps with faults, then a drain without them,
/// checking the invariants throughout.
///
/// Errors: [`Failure::Violation`] with the step it was found at; [`Failure::Setup`] when the
/// simulation's own files cannot be made.
pub fn run(options: &Options) -> Result<Summary, Failure> {
    let mut sim = Sim::new(options.seed)?;
    for _ in 0..options.steps {
        sim.step += 1;
        sim.take_step()?;
    }
    sim.drain()?;
    sim.finish()?;
    sim.summary.steps = sim.step;
    sim.summary.checks = sim.checks.made;
    Ok(sim.summary)
}

/// Runs `options` and, when it fails, looks for the shortest number of steps (before the
/// drain) that still fails: a violation found during the steps is its own shortest prefix (a
/// seed's first steps are the same whatever comes after); one found by the drain or the final
/// checks is bisected over the step count. Returns the failure and the steps that replay it.
pub fn run_shrinking(options: &Options) -> Result<Summary, (Failure, u64)> {
    match run(options) {
        Ok(s) => Ok(s),
        Err(f @ Failure::Setup(_)) => Err((f, options.steps)),
        Err(Failure::Violation { step, what }) if step <= options.steps => {
            Err((Failure::Violation { step, what }, step))
        }
        Err(first) => {
            let (mut lo, mut hi) = (0u64, options.steps);
            let mut found = first;
            // Invariant: `hi` steps fail (with `found`); `lo` steps pass (0 is not tried: a
            // run of no steps that fails is found as 1).
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                match run(&Options {
                    seed: options.seed,
                    steps: mid,
                }) {
                    Ok(_) => lo = mid,
                    Err(f) => {
                        found = f;
                        hi = mid;
                    }
                }
            }
            Err((found, hi))
        }
    }
}

/// The command that replays a failing run.
pub fn replay_command(seed: u64, steps: u64) -> String {
    format!("cargo run --release -p fleet-sim -- --seed {seed} --steps {steps}")
}

fn setup(e: impl std::fmt::Display) -> Failure {
    Failure::Setup(e.to_string())
}

impl Sim {
    fn new(seed: u64) -> Result<Sim, Failure> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // tmpfs when there is one: the store's syncs cost nothing there.
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::Builder::new()
                .prefix("fleet-sim-")
                .tempdir_in(shm)
        } else {
            tempfile::Builder::new().prefix("fleet-sim-").tempdir()
        }
        .map_err(setup)?;
        let state_dir = dir.path().join("state");
        let config_path = dir.path().join("fleet.toml");
        let shape = Shape::draw(&mut rng);
        let config = Arc::new(
            Config::parse(&shape.toml(&state_dir), &config_path)
                .map_err(|e| setup(format!("the simulated fleet.toml: {e}")))?,
        );
        // Made as the daemon makes it, then opened again with a busy timeout of a millisecond:
        // while a foreign writer holds the lock, the store's calls fail at once as busy
        // instead of waiting the default timeout out.
        let state = supervisor::statedir::StateDir::of(&config);
        drop(state.open_store().map_err(setup)?);
        let store =
            Store::open(&state.db_path(), std::time::Duration::from_millis(1)).map_err(setup)?;
        // A fixed instant, so that a seed replays the same times.
        let now = 1_800_000_000_000;
        Ok(Sim {
            rng,
            _dir: dir,
            world: World::new(&state_dir),
            state_dir,
            config_path,
            store,
            shape,
            config,
            daemon: None,
            lock: None,
            zombie: None,
            now,
            step: 0,
            summary: Summary::default(),
            checks: check::Checks::default(),
            paused: BTreeSet::new(),
            enqueued: Vec::new(),
            foreign: None,
        })
    }

    fn violation(&self, what: impl Into<String>) -> Failure {
        Failure::Violation {
            step: self.step,
            what: what.into(),
        }
    }

    fn fault(&mut self, kind: &'static str) {
        *self.summary.faults.entry(kind).or_default() += 1;
    }

    fn take_step(&mut self) -> Result<(), Failure> {
        self.foreign_lets_go(false)?;
        let roll = self.rng.gen_range(0..100u32);
        match roll {
            0..=21 => self.eval(true),
            22..=51 => self.shim_step(),
            52..=63 => self.enqueue(),
            64..=74 => {
                self.now += self.rng.gen_range(0..3_000);
                Ok(())
            }
            75 => {
                // The wall clock is stepped back (NTP, an operator): decisions see it go back.
                self.fault("wall clock stepped back");
                self.now -= self.rng.gen_range(1_000..60_000);
                Ok(())
            }
            76..=81 => self.cancel(),
            82..=86 => self.pause_or_resume(),
            87..=90 => self.edit_caps(),
            91..=94 => self.kill_shim(),
            95..=96 => {
                self.kill_daemon();
                Ok(())
            }
            97 => self.second_daemon(),
            99 => self.foreign_writer(),
            98 => self.zombie_eval(),
            _ => self.eval(false),
        }
    }

    /// Another program takes the database's write lock, or lets it go: meanwhile every write
    /// fails as busy, the daemon's and the commands' alike.
    fn foreign_writer(&mut self) -> Result<(), Failure> {
        if self.foreign.is_some() {
            return Ok(());
        }
        self.fault("foreign writer held the write lock");
        let path = supervisor::statedir::StateDir::of(&self.config).db_path();
        let conn = rusqlite::Connection::open(path).map_err(setup)?;
        conn.execute_batch("BEGIN IMMEDIATE").map_err(setup)?;
        let until = self.step + self.rng.gen_range(1..=30);
        self.foreign = Some((conn, until));
        Ok(())
    }

    /// The foreign writer lets the lock go once its time is up (`all`: now, whatever it is).
    fn foreign_lets_go(&mut self, all: bool) -> Result<(), Failure> {
        match self.foreign.take() {
            Some((conn, until)) if all || self.step >= until => {
                conn.execute_batch("COMMIT").map_err(setup)
            }
            kept => {
                self.foreign = kept;
                Ok(())
            }
        }
    }

    /// One EVAL (a daemon's start first, after a crash). `faults`: whether the daemon may be
    /// killed between two of its effects.
    fn eval(&mut self, faults: bool) -> Result<(), Failure> {
        if self.daemon.is_none() {
            let state = supervisor::statedir::StateDir::of(&self.config);
            match state.lock_daemon() {
                Ok(lock) => self.lock = Some(lock),
                Err(e) => {
                    return Err(self.violation(format!(
                    "a daemon could not lock the state directory with no other daemon running: {e}"
                )))
                }
            }
            let daemon = match Daemon::start(
                &self.store,
                &self.state_dir,
                self.config.clone(),
                self.now,
                &mut self.world,
            ) {
                Ok(d) => d,
                Err(_) if self.foreign.is_some() => {
                    // Busy: it tries again at a later step, as the daemon waits its start out.
                    self.lock = None;
                    return Ok(());
                }
                Err(e) => return Err(self.violation(format!("a daemon could not start: {e}"))),
            };
            self.daemon = Some(daemon);
        }
        let Some(daemon) = self.daemon.as_mut() else {
            return Ok(());
        };
        self.summary.evals += 1;
        let rng = &mut self.rng;
        let mut crash = || faults && rng.gen_range(0..40u32) == 0;
        let result = daemon.eval(
            &self.store,
            &self.state_dir,
            self.now,
            &mut self.world,
            &mut crash,
        );
        match result {
            Ok(evaluated) => {
                let config = daemon.config.clone();
                check::after_eval(self, &config, &evaluated)
            }
            Err(Stopped::Crashed) => {
                self.fault("daemon killed between two effects");
                self.kill_daemon_now();
                Ok(())
            }
            Err(Stopped::Failed(e)) if e.is_busy() && self.foreign.is_some() => Ok(()),
            Err(Stopped::Failed(e)) => Err(self.violation(format!("an EVAL failed: {e}"))),
            Err(Stopped::Fenced) => Err(self.violation("the only daemon was fenced off")),
        }
    }

    fn shim_step(&mut self) -> Result<(), Failure> {
        let live = self.world.live();
        if live.is_empty() {
            return Ok(());
        }
        let pid = live[self.rng.gen_range(0..live.len())];
        let code = if self.rng.gen_bool(0.7) {
            0
        } else {
            self.rng.gen_range(1..=3)
        };
        self.advance_shim(pid, code)
    }

    /// The shim `pid` takes one step (its command ending with `code`, if it runs); a command
    /// that starts is checked, and what the shim reports is delivered.
    fn advance_shim(&mut self, pid: i32, code: i32) -> Result<(), Failure> {
        let was = self
            .world
            .shims
            .get(&pid)
            .map(|s| (s.phase, s.run, s.token));
        let at = runrecord_time(self.now);
        let heard = self.world.advance(pid, code, &at).map_err(setup)?;
        if let Some((Phase::Spawned, run, token)) = was {
            if self.world.shims.get(&pid).map(|s| s.phase) == Some(Phase::Running) {
                self.summary.starts += 1;
                check::after_start(self, run, token)?;
            }
        }
        self.deliver(heard);
        Ok(())
    }

    /// Hands what shims reported to the daemon that follows them, if it is still this one.
    fn deliver(&mut self, heard: Vec<(Follower, RunId, u64, Report)>) {
        let Some(daemon) = self.daemon.as_mut() else {
            return;
        };
        for (follower, run, token, report) in heard {
            if follower.epoch() != daemon.epoch {
                continue;
            }
            match report {
                Report::Running(pid) => daemon.shim_running(run, token, pid),
                Report::Gone => daemon.shim_exited(run, token),
            }
        }
    }

    fn enqueue(&mut self) -> Result<(), Failure> {
        let i = self.rng.gen_range(0..PROJECTS);
        let project = format!("p{i}");
        let namespace = self
            .config
            .projects
            .get(&project)
            .map(|p| p.namespace.clone())
            .unwrap_or_else(|| "default".into());
        let new = NewRun {
            project,
            namespace,
            priority: self.rng.gen_range(0..3),
            trigger: Trigger::Manual,
            occurrence: None,
            not_before: 0,
            args: Vec::new(),
            env: Vec::new(),
            rerun_of: None,
            hook_of: None,
        };
        let id = match self.store.enqueue(&new, self.now) {
            Ok(id) => id,
            Err(e) if e.is_busy() && self.foreign.is_some() => return Ok(()),
            Err(e) => return Err(self.violation(format!("an enqueue failed: {e}"))),
        };
        self.enqueued.push(id);
        self.summary.runs += 1;
        Ok(())
    }

    fn cancel(&mut self) -> Result<(), Failure> {
        if self.enqueued.is_empty() {
            return Ok(());
        }
        let id = self.enqueued[self.rng.gen_range(0..self.enqueued.len())];
        match self.store.request_cancel(id, "simulated", self.now) {
            Ok(store::CancelOutcome::Cancelled) => {
                self.checks.cancelled_queued.insert(id);
                self.checks.cancel_accepted.insert(id);
                Ok(())
            }
            Ok(store::CancelOutcome::Requested) => {
                self.checks.cancel_accepted.insert(id);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) if e.is_busy() && self.foreign.is_some() => Ok(()),
            Err(e) => Err(self.violation(format!("a cancel of run {id} failed: {e}"))),
        }
    }

    fn pause_or_resume(&mut self) -> Result<(), Failure> {
        let namespace = self.rng.gen_bool(0.5);
        let name = if namespace {
            match self.shape.namespaces.first() {
                Some(_) if self.rng.gen_bool(0.5) => "a".to_string(),
                Some(_) => "b".to_string(),
                None => "default".to_string(),
            }
        } else {
            format!("p{}", self.rng.gen_range(0..PROJECTS))
        };
        let kind = if namespace {
            HoldKind::Namespace
        } else {
            HoldKind::Project
        };
        let key = (namespace, name.clone());
        let resume = self.paused.contains(&key);
        let result = if resume {
            self.store.resume(kind, &name).map(|_| ())
        } else {
            self.store.pause(kind, &name, None, self.now).map(|_| ())
        };
        match result {
            Ok(()) if resume => {
                self.paused.remove(&key);
                Ok(())
            }
            Ok(()) => {
                self.paused.insert(key);
                Ok(())
            }
            Err(e) if e.is_busy() && self.foreign.is_some() => Ok(()),
            Err(e) => Err(self.violation(format!("a pause or resume failed: {e}"))),
        }
    }

    fn edit_caps(&mut self) -> Result<(), Failure> {
        self.shape = self.shape.redraw_caps(&mut self.rng);
        let text = self.shape.toml(&self.state_dir);
        let config = Config::parse(&text, &self.config_path)
            .map_err(|e| setup(format!("the simulated fleet.toml: {e}")))?;
        self.config = Arc::new(config);
        // The daemon reloads it before its next EVAL.
        if let Some(d) = self.daemon.as_mut() {
            d.config = self.config.clone();
        }
        self.fault("caps edited");
        Ok(())
    }

    fn kill_shim(&mut self) -> Result<(), Failure> {
        let live = self.world.live();
        if live.is_empty() {
            return Ok(());
        }
        let pid = live[self.rng.gen_range(0..live.len())];
        let heard = self.world.kill(pid);
        self.fault("shim killed");
        self.deliver(heard);
        Ok(())
    }

    fn kill_daemon(&mut self) {
        if self.daemon.is_none() {
            return;
        }
        if self.zombie.is_none() && self.rng.gen_bool(0.25) {
            // It stalls instead, and its lock file is removed under it: the next daemon takes
            // a new lock and the state directory over, while this one may still wake up.
            self.fault("daemon stalled, its lock file removed");
            let state = supervisor::statedir::StateDir::of(&self.config);
            let _ = std::fs::remove_file(state.lock_path());
            self.zombie = self.daemon.take();
            self.lock = None;
            return;
        }
        self.fault("daemon killed");
        self.kill_daemon_now();
    }

    fn kill_daemon_now(&mut self) {
        if let Some(d) = self.daemon.take() {
            self.world.daemon_gone(d.epoch);
        }
        self.lock = None;
    }

    /// A second daemon tries to start on the state directory while one runs: it must be
    /// refused at its lock.
    fn second_daemon(&mut self) -> Result<(), Failure> {
        if self.daemon.is_none() {
            return Ok(());
        }
        self.fault("second daemon started");
        let state = supervisor::statedir::StateDir::of(&self.config);
        match state.lock_daemon() {
            Ok(_) => Err(self.violation(
                "a second daemon took the state directory's lock while one was running",
            )),
            Err(_) => Ok(()),
        }
    }

    /// The stalled daemon wakes up and runs one EVAL: once a newer daemon took over, nothing
    /// it writes may be kept. It then notices and stops.
    fn zombie_eval(&mut self) -> Result<(), Failure> {
        let Some(mut zombie) = self.zombie.take() else {
            return Ok(());
        };
        if self.daemon.is_none() {
            // Nobody took over yet: it simply goes on as the daemon, with its lock gone.
            self.zombie = Some(zombie);
            return Ok(());
        }
        self.fault("stalled daemon woke up");
        let mut never = || false;
        match zombie.eval(
            &self.store,
            &self.state_dir,
            self.now,
            &mut self.world,
            &mut never,
        ) {
            Err(Stopped::Fenced) | Err(Stopped::Failed(_)) => {}
            Err(Stopped::Crashed) => {}
            Ok(done) if done.claimed.is_empty() && done.ended.is_empty() => {}
            Ok(done) => {
                return Err(self.violation(format!(
                    "a daemon whose epoch ({}) was taken over wrote: claimed {:?}, ended {:?}",
                    zombie.epoch,
                    done.claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
                    done.ended.iter().map(|r| r.id).collect::<Vec<_>>()
                )))
            }
        }
        self.world.daemon_gone(zombie.epoch);
        Ok(())
    }

    /// The faults stop, every pause is lifted and time passes: every run must end.
    fn drain(&mut self) -> Result<(), Failure> {
        self.foreign_lets_go(true)?;
        for (namespace, name) in std::mem::take(&mut self.paused) {
            let kind = if namespace {
                HoldKind::Namespace
            } else {
                HoldKind::Project
            };
            self.store
                .resume(kind, &name)
                .map_err(|e| self.violation(format!("a resume failed: {e}")))?;
        }
        for _ in 0..20_000 {
            self.step += 1;
            self.eval(false)?;
            for pid in self.world.live() {
                let code = if self.rng.gen_bool(0.8) { 0 } else { 1 };
                self.advance_shim(pid, code)?;
            }
            self.now += 1_000;
            let open = self.open_runs()?;
            let waiting = self.daemon.as_ref().is_some_and(|d| d.has_work());
            if open.is_empty() && self.world.live().is_empty() && !waiting {
                return Ok(());
            }
        }
        let open = self.open_runs()?;
        Err(self.violation(format!(
            "liveness: with no fault and time passing, these runs never ended: {}",
            describe(&open)
        )))
    }

    /// The runs not yet ended, with their status.
    fn open_runs(&self) -> Result<Vec<(RunId, RunStatus)>, Failure> {
        let runs = self
            .store
            .list_runs(&RunFilter {
                statuses: vec![RunStatus::Queued, RunStatus::Starting, RunStatus::Running],
                ..RunFilter::default()
            })
            .map_err(|e| self.violation(format!("the runs could not be listed: {e}")))?;
        Ok(runs.into_iter().map(|r| (r.id, r.status)).collect())
    }

    fn finish(&mut self) -> Result<(), Failure> {
        check::all_runs(self)?;
        check::audit(self)
    }
}

fn describe(runs: &[(RunId, RunStatus)]) -> String {
    runs.iter()
        .take(10)
        .map(|(id, s)| format!("run {id} ({s})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `now` as the run files write times (RFC 3339, UTC).
fn runrecord_time(now: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(now)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
