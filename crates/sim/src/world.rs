//! The simulated world around the daemon's decisions: its shims and their commands, and the
//! truth of what ran, which the invariants are checked against (never fleet's report of
//! itself).
//!
//! A simulated shim does what a real one does to the run's files, through the same
//! [`runrecord`] calls and in the same order — it takes the run's lock, reads its tombstones and
//! an earlier claim's `started` record ([`RunFiles::before_start`]), writes `started` then
//! `running`, and at the end `exit`, then lets the lock go — but its command is only an entry
//! in [`Truth`]: it starts when the `started` record is written and ends when the shim says so.
//! What a shim does once it holds the lock (start, or not) is the real shim's decision,
//! [`supervisor::shim::start::decide`]. Its pid is a number no real process can have (above the kernel's largest), so that a
//! decision that probes processes finds none and one that signals them reaches nobody; every
//! signal the daemon's decisions send goes through [`World::signal`] instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use runrecord::{ExitRecord, Outcome, RunFiles, RunLock, RunningRecord, StartedRecord};
use store::RunId;
use supervisor::shim::start::{decide, Decision};
use supervisor::slots::ShimIdentity;

/// The first pid a simulated shim gets: above `pid_max` (at most 2^22), so no real process
/// ever has it. Each host's world starts [`PIDS_PER_HOST`] further on.
const FIRST_PID: i32 = 5_000_000;

/// How many pids one host's world may hand out before it would reach the next host's.
pub const PIDS_PER_HOST: i32 = 10_000_000;

/// Where a simulated shim is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Started by the daemon; it has not taken the run's lock yet.
    Spawned,
    /// Holds the lock; its command runs.
    Running,
    /// Gone.
    Gone,
}

/// Who hears of a shim's reports: the daemon that follows it, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follower {
    /// Its report pipe: the daemon that spawned it hears `running PID` and the pipe's end.
    Pipe(i64),
    /// Its run's lock: a daemon that adopted it hears only its end (the lock let go).
    Lock(i64),
}

impl Follower {
    /// The epoch of the daemon that follows.
    pub fn epoch(self) -> i64 {
        match self {
            Follower::Pipe(e) | Follower::Lock(e) => e,
        }
    }
}

/// One simulated shim.
pub struct Shim {
    /// Its run.
    pub run: RunId,
    /// The claim it was started for.
    pub token: u64,
    /// Its identity, as the daemon's slot records it.
    pub identity: ShimIdentity,
    /// Where it is.
    pub phase: Phase,
    /// The run's lock, while it holds it.
    lock: Option<RunLock>,
    /// It got SIGTERM (a cancel): its command ends by that signal.
    pub term: bool,
    /// Who hears of it; `None` once its daemon crashed and no other adopted it.
    pub follower: Option<Follower>,
}

/// What happened to a shim at one step, for the daemon that follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// Its command started, with this pid (the `running PID` line).
    Running(i32),
    /// It is gone (the pipe's end, or the lock let go).
    Gone,
}

/// The truth of one run's command, as the world saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Command {
    /// The claims whose shims started the command (more than one is a double start).
    pub started_by: Vec<u64>,
    /// How it ended: its exit code, or the signal that ended it; `None` while it runs or when
    /// its shim died with it (nothing recorded its end).
    pub ended: Option<End>,
    /// Its shim died with it: nothing recorded the end.
    pub lost: bool,
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// It exited with this code.
    Exited(i32),
    /// The shim's SIGTERM (a cancel) ended it.
    Cancelled,
}

/// What really ran.
#[derive(Default)]
pub struct Truth {
    /// Every run whose command started, by run.
    pub commands: BTreeMap<RunId, Command>,
    /// The runs whose command runs now (kept apart: the caps are counted on it after every
    /// claim, and `commands` only grows).
    running: BTreeSet<RunId>,
}

impl Truth {
    /// The runs whose command runs now.
    pub fn running(&self) -> impl Iterator<Item = RunId> + '_ {
        self.running.iter().copied()
    }
}

/// The simulated shims and the truth.
pub struct World {
    /// The state directory the run files are in.
    pub state_dir: PathBuf,
    /// The shims alive, by pid (a shim is forgotten once gone).
    pub shims: BTreeMap<i32, Shim>,
    /// The next pid.
    next_pid: i32,
    /// What ran.
    pub truth: Truth,
}

impl World {
    /// The world of host number `host`, over its state directory `state_dir`, with no shims.
    pub fn new(state_dir: &Path, host: usize) -> World {
        World {
            state_dir: state_dir.to_path_buf(),
            shims: BTreeMap::new(),
            next_pid: FIRST_PID + PIDS_PER_HOST * i32::try_from(host).unwrap_or(0),
            truth: Truth::default(),
        }
    }

    /// The daemon of `epoch` starts a shim for claim `token` of `run`.
    pub fn spawn(&mut self, run: RunId, token: u64, epoch: i64) -> ShimIdentity {
        let pid = self.next_pid;
        self.next_pid += 1;
        let identity = ShimIdentity {
            pid,
            start_time: pid as u64,
        };
        self.shims.insert(
            pid,
            Shim {
                run,
                token,
                identity,
                phase: Phase::Spawned,
                lock: None,
                term: false,
                follower: Some(Follower::Pipe(epoch)),
            },
        );
        identity
    }

    /// Whether the shim `identity` names is still alive.
    pub fn alive(&self, identity: ShimIdentity) -> bool {
        self.shims
            .get(&identity.pid)
            .is_some_and(|s| s.identity == identity && s.phase != Phase::Gone)
    }

    /// Sends SIGTERM to a shim: true when it was alive to get it.
    pub fn signal(&mut self, identity: ShimIdentity) -> bool {
        match self.shims.get_mut(&identity.pid) {
            Some(s) if s.identity == identity && s.phase != Phase::Gone => {
                s.term = true;
                true
            }
            _ => false,
        }
    }

    /// The live shims, by pid.
    pub fn live(&self) -> Vec<i32> {
        self.shims
            .iter()
            .filter(|(_, s)| s.phase != Phase::Gone)
            .map(|(pid, _)| *pid)
            .collect()
    }

    /// A daemon crashed: no shim is followed by it any more (its pipes are gone).
    pub fn daemon_gone(&mut self, epoch: i64) {
        for s in self.shims.values_mut() {
            if s.follower.is_some_and(|f| f.epoch() == epoch) {
                s.follower = None;
            }
        }
    }

    /// The daemon of `epoch` adopted the run `run` under claim `token`: it follows the shim
    /// that holds its lock through that lock.
    pub fn adopt(&mut self, run: RunId, token: u64, epoch: i64) {
        for s in self.shims.values_mut() {
            if s.run == run && s.token == token && s.phase == Phase::Running {
                s.follower = Some(Follower::Lock(epoch));
            }
        }
    }

    /// The shim `pid` takes one step of its life as a real one would: a spawned shim takes the
    /// lock and starts its command (or, finding its claim tombstoned or another claim's start
    /// recorded, starts nothing and goes); a running one ends its command with `code` (or by
    /// the cancel's signal) and records it. Returns what its follower hears, and to whom.
    ///
    /// Errors: the run files could not be read or written (a bug of the simulation's world:
    /// it has no failing disk).
    pub fn advance(
        &mut self,
        pid: i32,
        code: i32,
        now_rfc: &str,
    ) -> std::io::Result<Vec<(Follower, RunId, u64, Report)>> {
        let heard = self.step_shim(pid, code, now_rfc);
        self.forget_if_gone(pid);
        heard
    }

    /// A shim gone is forgotten: the world holds the live ones only, so that a long simulation
    /// does not look through every shim it ever started at each step. (A pid is never reused,
    /// so a gone one is simply not found: not alive, not signalled.)
    fn forget_if_gone(&mut self, pid: i32) {
        if self.shims.get(&pid).is_some_and(|s| s.phase == Phase::Gone) {
            self.shims.remove(&pid);
        }
    }

    fn step_shim(
        &mut self,
        pid: i32,
        code: i32,
        now_rfc: &str,
    ) -> std::io::Result<Vec<(Follower, RunId, u64, Report)>> {
        let Some(shim) = self.shims.get_mut(&pid) else {
            return Ok(Vec::new());
        };
        let files = RunFiles::new(&self.state_dir, shim.run);
        let mut heard = Vec::new();
        match shim.phase {
            Phase::Spawned => {
                files.create_runs_dir()?;
                let Some(lock) = files.try_lock()? else {
                    // Another shim of the run holds it (a late shim of an older claim): a real
                    // shim waits for it; this one tries again at a later step.
                    return Ok(heard);
                };
                let before = files.before_start(&lock, shim.token)?;
                // The real shim's decision, on what the files hold.
                let history = match decide(shim.run, shim.token, before, now_rfc) {
                    Decision::GivenUp => {
                        // Recovery gave this claim up: it starts nothing, writes nothing.
                        drop(lock);
                        shim.phase = Phase::Gone;
                        if let Some(f) = shim.follower {
                            heard.push((f, shim.run, shim.token, Report::Gone));
                        }
                        return Ok(heard);
                    }
                    Decision::NotAgain { exit, .. } => {
                        // Another claim's command started: this one starts nothing.
                        files.write_exit(&lock, &exit)?;
                        drop(lock);
                        shim.phase = Phase::Gone;
                        if let Some(f) = shim.follower {
                            heard.push((f, shim.run, shim.token, Report::Gone));
                        }
                        return Ok(heard);
                    }
                    Decision::Start { history, .. } => history,
                };
                files.write_started(
                    &lock,
                    &StartedRecord {
                        token: shim.token,
                        shim_pid: pid,
                        shim_start_time: shim.identity.start_time,
                        at: now_rfc.to_string(),
                        history,
                    },
                )?;
                self.truth
                    .commands
                    .entry(shim.run)
                    .or_default()
                    .started_by
                    .push(shim.token);
                self.truth.running.insert(shim.run);
                files.write_running(
                    &lock,
                    &RunningRecord {
                        token: shim.token,
                        pid,
                        at: now_rfc.to_string(),
                    },
                )?;
                shim.lock = Some(lock);
                shim.phase = Phase::Running;
                if let Some(f @ Follower::Pipe(_)) = shim.follower {
                    heard.push((f, shim.run, shim.token, Report::Running(pid)));
                }
            }
            Phase::Running => {
                let end = if shim.term {
                    End::Cancelled
                } else {
                    End::Exited(code)
                };
                let (outcome, code, signal) = match end {
                    End::Exited(c) => (Outcome::Exited, Some(c), None),
                    End::Cancelled => (Outcome::Signalled, None, Some(15)),
                };
                let exit = ExitRecord {
                    token: shim.token,
                    outcome,
                    code,
                    signal,
                    timed_out: false,
                    term_requested: shim.term,
                    error: None,
                    started_at: Some(now_rfc.to_string()),
                    finished_at: now_rfc.to_string(),
                    repeats: None,
                };
                if let Some(lock) = shim.lock.take() {
                    files.write_exit(&lock, &exit)?;
                }
                if let Some(c) = self.truth.commands.get_mut(&shim.run) {
                    c.ended = Some(end);
                }
                self.truth.running.remove(&shim.run);
                shim.phase = Phase::Gone;
                if let Some(f) = shim.follower {
                    heard.push((f, shim.run, shim.token, Report::Gone));
                }
            }
            Phase::Gone => {}
        }
        Ok(heard)
    }

    /// The shim `pid` is killed (SIGKILL, out of memory): its lock goes with it, nothing more
    /// is recorded, and its command dies with it (its parent-death signal).
    pub fn kill(&mut self, pid: i32) -> Vec<(Follower, RunId, u64, Report)> {
        let Some(shim) = self.shims.get_mut(&pid) else {
            return Vec::new();
        };
        if shim.phase == Phase::Gone {
            return Vec::new();
        }
        if shim.phase == Phase::Running {
            if let Some(c) = self.truth.commands.get_mut(&shim.run) {
                if c.ended.is_none() {
                    c.lost = true;
                }
            }
            self.truth.running.remove(&shim.run);
        }
        shim.lock = None;
        shim.phase = Phase::Gone;
        let heard = shim
            .follower
            .map(|f| vec![(f, shim.run, shim.token, Report::Gone)])
            .unwrap_or_default();
        self.forget_if_gone(pid);
        heard
    }

    /// The machine restarts: every shim dies with it, its command lost (as [`World::kill`]).
    /// A shim does not wait for the disk when it records its command's start, so the records of
    /// a run whose command was running may be lost with the page cache: for each such run
    /// `lost` says whether they were, and then every record of it is gone but the tombstones
    /// (which recovery makes durable).
    ///
    /// Errors: the run files could not be locked or rewritten.
    pub fn machine_restart(&mut self, lost: &mut dyn FnMut() -> bool) -> std::io::Result<()> {
        let running: Vec<RunId> = self.truth.running().collect();
        for pid in self.live() {
            self.kill(pid);
        }
        for run in running {
            if !lost() {
                continue;
            }
            let files = RunFiles::new(&self.state_dir, run);
            if let Some(lock) = files.try_lock()? {
                files.remove(lock)?;
            }
        }
        Ok(())
    }
}
