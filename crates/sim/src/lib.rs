//! fleet-sim: the daemon's decisions run in a simulated world, one seeded step at a time, with
//! faults injected between any two of them and fleet's invariants checked after every step
//! against the world's own truth.
//!
//! What is real: the store (SQLite, on tmpfs when there is one; or a PostgreSQL database made
//! for the run and shared by several hosts, each with its own state directory, daemon, shims
//! and wall clock), the run files (written and
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
//! ended; a queued run whose cancel was accepted never starts; no schedule occurrence fires
//! twice or early; once the faults stop and time
//! passes, every run ends (nothing stays queued or active); and `fleet check`'s audit of the
//! store and the run files finds nothing. With many hosts they hold fleet-wide, with a
//! host's own cap and a project's hosts besides, no live host's name taken from another
//! place, and every run's end written on the database's clock whatever its host's.

mod check;
mod database;
mod drain;
mod faults;
pub mod host;
mod operator;
mod shape;
pub mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use config::Config;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use store::{HostInfo, Millis, Place, RunId, Store};

use database::SimDatabase;
use host::{Daemon, Stopped};
use shape::Shape;
use world::{Follower, Phase, Report, World};

/// How a simulation is run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The seed every step is drawn from.
    pub seed: u64,
    /// How many steps, before the faults stop and the simulation drains.
    pub steps: u64,
    /// How many hosts (each a daemon with its own state directory); more than one needs
    /// `database`.
    pub hosts: usize,
    /// A PostgreSQL server (a `postgresql://` URL) the simulation may create a database on,
    /// and drop it after: the hosts share it. `None`: SQLite, one host.
    pub database: Option<String>,
}

impl Options {
    /// `steps` steps of seed `seed`, on one host and SQLite.
    pub fn new(seed: u64, steps: u64) -> Options {
        Options {
            seed,
            steps,
            hosts: 1,
            database: None,
        }
    }
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
    /// Schedule occurrences fired (first attempts).
    pub fired: u64,
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

/// One simulated host: its machine's files and clock, its daemon, and its shims.
struct Host {
    /// Its name (`h0`…).
    name: String,
    state_dir: PathBuf,
    config_path: PathBuf,
    /// Its fleet.toml: the same caps and projects on every host, its own `host` name.
    config: Arc<Config>,
    /// Where its daemon runs, on a shared database (`None` on SQLite, which records none).
    place: Option<Place>,
    daemon: Option<Daemon>,
    /// The state directory's daemon lock, held while a daemon runs.
    lock: Option<supervisor::statedir::DaemonLock>,
    /// A daemon that stalled (stopped, swapped out) while its lock file was removed and a new
    /// daemon took over: it may still try to write once, and must be refused.
    zombie: Option<Daemon>,
    world: World,
    /// How far its wall clock is ahead of the database's (ms): the times its shims write are
    /// on it. Always 0 on SQLite, whose clock is the host's.
    offset: Millis,
    /// The database's time at its daemon's last heartbeat (shared database only).
    beat: Option<Millis>,
    /// The database's time when its wall clock was last stepped: an exit record written
    /// before a step and read after it is moved by the new offset, off by the step.
    stepped_at: Option<Millis>,
    /// Its machine is lost (shared database only): no daemon, no shim, until it comes back.
    down: bool,
    /// How many times its machine restarted: each boot has an id of its own.
    boot: u32,
}

/// The simulation.
struct Sim {
    rng: ChaCha8Rng,
    /// The store every host uses (dropped before the database it is on).
    store: Store,
    /// The PostgreSQL database made for this simulation, dropped with it.
    _database: Option<SimDatabase>,
    /// Holds the hosts' folders for the simulation's life.
    _dir: tempfile::TempDir,
    shape: Shape,
    hosts: Vec<Host>,
    /// The database's clock (milliseconds since the epoch, UTC): the one the hosts' daemons
    /// judge time by (on SQLite, the one host's own).
    now: Millis,
    step: u64,
    summary: Summary,
    checks: check::Checks,
    paused: BTreeSet<(bool, String)>,
    /// Runs enqueued so far (their ids are 1..=this, in order).
    enqueued: Vec<RunId>,
    /// Another program's connection holding the database's write lock (`BEGIN IMMEDIATE`),
    /// and the step it lets go at (SQLite).
    foreign: Option<(rusqlite::Connection, u64)>,
}

/// Runs one simulation: `options.steps` seeded steps with faults, then a drain without them,
/// checking the invariants throughout.
///
/// Errors: [`Failure::Violation`] with the step it was found at; [`Failure::Setup`] when the
/// simulation's own files or database cannot be made.
pub fn run(options: &Options) -> Result<Summary, Failure> {
    let mut sim = Sim::new(options)?;
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
                    steps: mid,
                    ..options.clone()
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

/// The command that replays a failing run of `options` in `steps` steps.
pub fn replay_command(options: &Options, steps: u64) -> String {
    let mut line = format!(
        "cargo run --release -p fleet-sim -- --seed {} --steps {steps}",
        options.seed
    );
    if options.hosts != 1 {
        line.push_str(&format!(" --hosts {}", options.hosts));
    }
    if let Some(url) = &options.database {
        line.push_str(&format!(
            " --database '{}'",
            store::mask_postgres_password(url)
        ));
    }
    line
}

fn setup(e: impl std::fmt::Display) -> Failure {
    Failure::Setup(e.to_string())
}

/// The place of host `name`'s daemon on a shared database: a machine and a state directory
/// of the simulation's own.
fn place_of(name: &str) -> Place {
    Place {
        machine: format!("sim-{name}"),
        state_dir_id: format!("state-of-{name}"),
    }
}

impl Sim {
    fn new(options: &Options) -> Result<Sim, Failure> {
        if options.hosts == 0 || (options.hosts > 1 && options.database.is_none()) {
            return Err(setup(
                "more than one host needs a PostgreSQL server (--database)",
            ));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
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
        let database = match &options.database {
            Some(server) => Some(SimDatabase::create(server).map_err(setup)?),
            None => None,
        };
        let url = database.as_ref().map(|d| d.url.clone());
        let shape = Shape::draw(&mut rng, options.hosts);
        let mut hosts = Vec::new();
        for i in 0..options.hosts {
            let name = shape.hosts[i].0.clone();
            let state_dir = dir.path().join(&name).join("state");
            let config_path = dir.path().join(&name).join("fleet.toml");
            std::fs::create_dir_all(dir.path().join(&name)).map_err(setup)?;
            let config = Arc::new(
                Config::parse(&shape.toml(&state_dir, i, url.as_deref()), &config_path)
                    .map_err(|e| setup(format!("the simulated fleet.toml: {e}")))?,
            );
            // Hosts other than the first have clocks off the database's, each its own way.
            let offset = if i == 0 || url.is_none() {
                0
            } else {
                rng.gen_range(-60_000..=60_000)
            };
            hosts.push(Host {
                world: World::new(&state_dir, i),
                place: url.as_ref().map(|_| place_of(&name)),
                name,
                state_dir,
                config_path,
                config,
                daemon: None,
                lock: None,
                zombie: None,
                offset,
                beat: None,
                stepped_at: None,
                down: false,
                boot: 0,
            });
        }
        // Made as the daemon makes it. SQLite: opened again with a busy timeout of a
        // millisecond, so that while a foreign writer holds the lock the store's calls fail at
        // once as busy instead of waiting the default timeout out.
        let state = supervisor::statedir::StateDir::of(&hosts[0].config);
        let made = state.open_store().map_err(setup)?;
        let store = if url.is_some() {
            made
        } else {
            drop(made);
            Store::open(&state.db_path(), Duration::from_millis(1)).map_err(setup)?
        };
        // A fixed instant, so that a seed replays the same times; on PostgreSQL the server's
        // next whole minute, since the server judges a host's liveness at a take-over by its
        // own clock: the simulation's clock starts there and only runs ahead of it. (The
        // schedules' periods divide a minute, so the same seed fires at the same moments.)
        let now = match &database {
            Some(db) => (db.server_now / 60_000 + 1) * 60_000,
            None => 1_800_000_000_000,
        };
        Ok(Sim {
            rng,
            store,
            _database: database,
            _dir: dir,
            shape,
            hosts,
            now,
            step: 0,
            summary: Summary::default(),
            checks: check::Checks::default(),
            paused: BTreeSet::new(),
            enqueued: Vec::new(),
            foreign: None,
        })
    }

    /// Whether the hosts share a PostgreSQL database.
    fn shared(&self) -> bool {
        self._database.is_some()
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

    fn any_host(&mut self) -> usize {
        self.rng.gen_range(0..self.hosts.len())
    }

    fn take_step(&mut self) -> Result<(), Failure> {
        self.foreign_lets_go(false)?;
        let roll = self.rng.gen_range(0..100u32);
        match roll {
            0..=21 => {
                let h = self.any_host();
                self.eval(h, true, true)
            }
            22..=51 => self.shim_step(),
            52..=63 => self.enqueue(),
            64..=74 => {
                self.now += self.rng.gen_range(0..3_000);
                Ok(())
            }
            75 => {
                self.step_clock();
                Ok(())
            }
            76..=81 => self.cancel(),
            82..=86 => self.pause_or_resume(),
            87..=90 => self.edit_caps(),
            91..=94 => self.kill_shim(),
            95..=96 if self.rng.gen_bool(0.2) => {
                let h = self.any_host();
                self.restart_machine(h)
            }
            95..=96 => {
                let h = self.any_host();
                self.kill_daemon(h);
                Ok(())
            }
            97 => {
                let h = self.any_host();
                self.second_daemon(h)
            }
            99 if self.shared() && self.rng.gen_bool(0.5) => self.lose_or_bring_back(),
            99 if self.shared() => {
                let h = self.any_host();
                self.same_name_elsewhere(h)
            }
            99 if self.rng.gen_bool(0.5) => self.end_by_hand(),
            99 => self.foreign_writer(),
            98 => {
                let h = self.any_host();
                self.zombie_eval(h)
            }
            _ => {
                let h = self.any_host();
                self.eval(h, false, true)
            }
        }
    }

    /// On a shared database, host `h`'s daemon reads the database's clock, as it does at
    /// its start and at every heartbeat: from then on the times its machine writes (its
    /// shims' records) are taken to the database's clock by its offset. The reading is the
    /// real follower's ([`store::db_clock::follow`]); no time passes between it and its use.
    fn follow_clock(&self, h: usize) {
        if self.shared() {
            let at = Instant::now() + Duration::from_secs(3600);
            store::db_clock::follow(store::db_clock::ClockReading {
                at,
                database_ms: self.now,
                local_ms: self.now + self.hosts[h].offset,
                round_trip: Duration::ZERO,
            });
        }
    }

    /// One EVAL of host `h` (its daemon's start first, after a crash), then, on a shared
    /// database, its heartbeat. `faults`: whether the daemon may be killed between two of its
    /// effects. `split`: whether an EVAL that has packed stops there, its claim made by the
    /// host's next EVAL step (see [`Daemon::eval`]).
    fn eval(&mut self, h: usize, faults: bool, split: bool) -> Result<(), Failure> {
        if self.hosts[h].down {
            return Ok(());
        }
        self.follow_clock(h);
        if self.hosts[h].daemon.is_none() {
            let state = supervisor::statedir::StateDir::of(&self.hosts[h].config);
            match state.lock_daemon() {
                Ok(lock) => self.hosts[h].lock = Some(lock),
                Err(e) => {
                    return Err(self.violation(format!(
                    "host {}: a daemon could not lock the state directory with no other daemon running: {e}",
                    self.hosts[h].name
                )))
                }
            }
            let host = &mut self.hosts[h];
            let daemon = match Daemon::start(
                &self.store,
                &host.state_dir,
                host.place.as_ref(),
                host.boot,
                host.config.clone(),
                self.now,
                &mut host.world,
            ) {
                Ok(d) => d,
                Err(_) if self.foreign.is_some() => {
                    // Busy: it tries again at a later step, as the daemon waits its start out.
                    self.hosts[h].lock = None;
                    return Ok(());
                }
                Err(e) => {
                    return Err(self.violation(format!(
                        "host {}: a daemon could not start: {e}",
                        self.hosts[h].name
                    )))
                }
            };
            self.hosts[h].daemon = Some(daemon);
        }
        self.summary.evals += 1;
        let rng = &mut self.rng;
        let mut crash = || faults && rng.gen_range(0..40u32) == 0;
        let host = &mut self.hosts[h];
        let Some(daemon) = host.daemon.as_mut() else {
            return Ok(());
        };
        let result = daemon.eval(
            &self.store,
            &host.state_dir,
            self.now,
            &mut host.world,
            &mut crash,
            split,
        );
        match result {
            Ok(evaluated) => {
                let config = daemon.config.clone();
                check::after_eval(self, h, &config, &evaluated)?;
                self.heartbeat(h)
            }
            Err(Stopped::Crashed(evaluated)) => {
                // What it wrote before it died is checked as any EVAL's.
                let config = daemon.config.clone();
                self.fault("daemon killed between two effects");
                self.kill_daemon_now(h);
                check::after_eval(self, h, &config, &evaluated)
            }
            Err(Stopped::Failed(e)) if e.is_busy() && self.foreign.is_some() => Ok(()),
            Err(Stopped::Failed(e)) => {
                Err(self.violation(format!("host {}: an EVAL failed: {e}", self.hosts[h].name)))
            }
            Err(Stopped::Fenced) => Err(self.violation(format!(
                "host {}: its daemon was fenced off, though no other took its name over",
                self.hosts[h].name
            ))),
        }
    }

    /// Host `h`'s daemon says it is alive (a shared database only): refused only if another
    /// took its name over, which the simulation never lets happen.
    fn heartbeat(&mut self, h: usize) -> Result<(), Failure> {
        if !self.shared() {
            return Ok(());
        }
        let host = &self.hosts[h];
        let Some(daemon) = &host.daemon else {
            return Ok(());
        };
        let info = HostInfo {
            config_version: None,
            config_digest: None,
            http_addr: None,
            clock_offset_ms: Some(host.offset),
        };
        match self.store.heartbeat(daemon.epoch, &info, self.now) {
            Ok(()) => {
                self.hosts[h].beat = Some(self.now);
                Ok(())
            }
            Err(e) => Err(self.violation(format!(
                "host {}: its heartbeat was refused: {e}",
                self.hosts[h].name
            ))),
        }
    }

    /// Every live shim, by host and pid.
    fn live_shims(&self) -> Vec<(usize, i32)> {
        self.hosts
            .iter()
            .enumerate()
            .flat_map(|(h, host)| host.world.live().into_iter().map(move |pid| (h, pid)))
            .collect()
    }

    fn shim_step(&mut self) -> Result<(), Failure> {
        let live = self.live_shims();
        if live.is_empty() {
            return Ok(());
        }
        let (h, pid) = live[self.rng.gen_range(0..live.len())];
        let code = if self.rng.gen_bool(0.7) {
            0
        } else {
            self.rng.gen_range(1..=3)
        };
        self.advance_shim(h, pid, code)
    }

    /// The shim `pid` of host `h` takes one step (its command ending with `code`, if it runs);
    /// a command that starts is checked, and what the shim reports is delivered. The times it
    /// writes are its machine's.
    fn advance_shim(&mut self, h: usize, pid: i32, code: i32) -> Result<(), Failure> {
        let host = &mut self.hosts[h];
        let was = host
            .world
            .shims
            .get(&pid)
            .map(|s| (s.phase, s.run, s.token));
        let at = runrecord_time(self.now + host.offset);
        let heard = host.world.advance(pid, code, &at).map_err(setup)?;
        if let Some((Phase::Spawned, run, token)) = was {
            if self.hosts[h].world.shims.get(&pid).map(|s| s.phase) == Some(Phase::Running) {
                self.summary.starts += 1;
                check::after_start(self, h, run, token)?;
            }
        }
        self.deliver(h, heard);
        Ok(())
    }

    /// Hands what host `h`'s shims reported to the daemon that follows them, if it is still
    /// this one.
    fn deliver(&mut self, h: usize, heard: Vec<(Follower, RunId, u64, Report)>) {
        let Some(daemon) = self.hosts[h].daemon.as_mut() else {
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

    fn finish(&mut self) -> Result<(), Failure> {
        check::all_runs(self)?;
        for h in 0..self.hosts.len() {
            check::audit(self, h)?;
        }
        Ok(())
    }
}

/// `at` as the run files write times (RFC 3339, UTC).
fn runrecord_time(at: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(at)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
