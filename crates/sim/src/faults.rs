//! The faults the simulation injects besides a daemon killed inside an EVAL: another program
//! holding the database's write lock, a shim or a daemon killed, a daemon that stalls while
//! its lock file is removed and wakes up after another took over, a second daemon on the same
//! state directory, a running run's row ended by another program, a host's wall clock stepped,
//! and (on a shared database) a daemon started
//! under a live host's name from another place.

use rand::Rng;
use store::{Place, RunId, StoreError};

use crate::host::Stopped;
use crate::{setup, Failure, Sim};

impl Sim {
    /// Another program takes the database's write lock (SQLite), or lets it go: meanwhile
    /// every write fails as busy, the daemon's and the commands' alike.
    pub(crate) fn foreign_writer(&mut self) -> Result<(), Failure> {
        if self.foreign.is_some() {
            return Ok(());
        }
        self.fault("foreign writer held the write lock");
        let path = supervisor::statedir::StateDir::of(&self.hosts[0].config).db_path();
        let conn = rusqlite::Connection::open(path).map_err(setup)?;
        conn.execute_batch("BEGIN IMMEDIATE").map_err(setup)?;
        let until = self.step + self.rng.gen_range(1..=30);
        self.foreign = Some((conn, until));
        Ok(())
    }

    /// Another program ends by hand the row of a run whose command still runs (an operator's
    /// `UPDATE runs SET status = 'failed'`): the database's running set no longer lists it,
    /// and only the daemon's own slot pool still counts its seat until its command ends. SQLite
    /// only; nothing while the write lock is held.
    pub(crate) fn end_by_hand(&mut self) -> Result<(), Failure> {
        if self.foreign.is_some() {
            return Ok(());
        }
        let running: Vec<RunId> = self.hosts[0].world.truth.running().collect();
        if running.is_empty() {
            return Ok(());
        }
        let run = running[self.rng.gen_range(0..running.len())];
        let path = supervisor::statedir::StateDir::of(&self.hosts[0].config).db_path();
        let conn = rusqlite::Connection::open(path).map_err(setup)?;
        let changed = conn
            .execute(
                "UPDATE runs SET status = 'failed', finished_at = ?2, reason = 'ended by hand' \
                 WHERE id = ?1 AND status IN ('starting', 'running')",
                rusqlite::params![run, self.now],
            )
            .map_err(setup)?;
        if changed > 0 {
            self.fault("a running run's row ended by another program");
            self.checks.ended_by_hand.insert(run);
        }
        Ok(())
    }

    /// The foreign writer lets the lock go once its time is up (`all`: now, whatever it is).
    pub(crate) fn foreign_lets_go(&mut self, all: bool) -> Result<(), Failure> {
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

    /// A wall clock is stepped (NTP, an operator). On SQLite, the one host's clock is the
    /// database's: decisions see it go back, by up to 20 s (less, on average, than time
    /// passing moves it on in between: a clock that mostly ran backwards would pile every
    /// delayed retry up in a future that never comes). On a shared database, one host's clock moves
    /// away from the database's (or back to it); what its machine writes from then on is on
    /// the new time.
    pub(crate) fn step_clock(&mut self) {
        if self.shared() {
            let h = self.any_host();
            self.fault("a host's wall clock stepped");
            self.hosts[h].offset = self.rng.gen_range(-60_000..=60_000);
            self.hosts[h].stepped_at = Some(self.now);
        } else {
            self.fault("wall clock stepped back");
            self.now -= self.rng.gen_range(1_000..20_000);
        }
    }

    pub(crate) fn kill_shim(&mut self) -> Result<(), Failure> {
        let live = self.live_shims();
        if live.is_empty() {
            return Ok(());
        }
        let (h, pid) = live[self.rng.gen_range(0..live.len())];
        let heard = self.hosts[h].world.kill(pid);
        self.fault("shim killed");
        self.deliver(h, heard);
        Ok(())
    }

    pub(crate) fn kill_daemon(&mut self, h: usize) {
        if self.hosts[h].daemon.is_none() {
            return;
        }
        if self.hosts[h].zombie.is_none() && self.rng.gen_bool(0.25) {
            // It stalls instead, and its lock file is removed under it: the next daemon takes
            // a new lock and the state directory over, while this one may still wake up.
            self.fault("daemon stalled, its lock file removed");
            let host = &mut self.hosts[h];
            let state = supervisor::statedir::StateDir::of(&host.config);
            let _ = std::fs::remove_file(state.lock_path());
            host.zombie = host.daemon.take();
            host.lock = None;
            return;
        }
        self.fault("daemon killed");
        self.kill_daemon_now(h);
    }

    /// Host `h`'s machine restarts: its daemon, its stalled daemon and its shims die, the
    /// `started` records of some commands that were running are lost with the page cache, and
    /// the next daemon runs in a new boot.
    pub(crate) fn restart_machine(&mut self, h: usize) -> Result<(), Failure> {
        if self.hosts[h].down {
            return Ok(());
        }
        self.fault("machine restarted");
        self.kill_daemon_now(h);
        let rng = &mut self.rng;
        let host = &mut self.hosts[h];
        host.zombie = None;
        host.boot += 1;
        host.world
            .machine_restart(&mut || rng.gen_bool(0.5))
            .map_err(|e| setup(format!("the simulated machine's restart: {e}")))
    }

    pub(crate) fn kill_daemon_now(&mut self, h: usize) {
        let host = &mut self.hosts[h];
        if let Some(d) = host.daemon.take() {
            host.world.daemon_gone(d.epoch);
        }
        host.lock = None;
    }

    /// A second daemon tries to start on host `h`'s state directory while one runs: it must be
    /// refused at its lock.
    pub(crate) fn second_daemon(&mut self, h: usize) -> Result<(), Failure> {
        if self.hosts[h].daemon.is_none() {
            return Ok(());
        }
        self.fault("second daemon started");
        let state = supervisor::statedir::StateDir::of(&self.hosts[h].config);
        match state.lock_daemon() {
            Ok(_) => Err(self.violation(format!(
                "host {}: a second daemon took the state directory's lock while one was running",
                self.hosts[h].name
            ))),
            Err(_) => Ok(()),
        }
    }

    /// Host `h`'s stalled daemon wakes up and runs one EVAL: once a newer daemon took over,
    /// nothing it writes may be kept. It then notices and stops.
    pub(crate) fn zombie_eval(&mut self, h: usize) -> Result<(), Failure> {
        let Some(mut zombie) = self.hosts[h].zombie.take() else {
            return Ok(());
        };
        if self.hosts[h].daemon.is_none() {
            // Nobody took over yet: it simply goes on as the daemon, with its lock gone.
            self.hosts[h].zombie = Some(zombie);
            return Ok(());
        }
        self.fault("stalled daemon woke up");
        self.follow_clock(h);
        let mut never = || false;
        let host = &mut self.hosts[h];
        match zombie.eval(
            &self.store,
            &host.state_dir,
            self.now,
            &mut host.world,
            &mut never,
            false,
        ) {
            Err(Stopped::Fenced) | Err(Stopped::Failed(_)) => {}
            Err(Stopped::Crashed(_)) => {}
            Ok(done) if done.claimed.is_empty() && done.ended.is_empty() => {}
            Ok(done) => {
                return Err(self.violation(format!(
                "host {}: a daemon whose epoch ({}) was taken over wrote: claimed {:?}, ended {:?}",
                self.hosts[h].name,
                zombie.epoch,
                done.claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
                done.ended.iter().map(|r| r.id).collect::<Vec<_>>()
            )))
            }
        }
        self.hosts[h].world.daemon_gone(zombie.epoch);
        Ok(())
    }

    /// A daemon on another machine (a copied fleet.toml) starts under host `h`'s name while
    /// `h`'s daemon runs and has beaten within the liveness bound, by the database's clock: it
    /// must be refused, and leave nothing written (`h`'s next write is not fenced).
    pub(crate) fn same_name_elsewhere(&mut self, h: usize) -> Result<(), Failure> {
        let host = &self.hosts[h];
        let alive = host.daemon.is_some()
            && host
                .beat
                .is_some_and(|b| self.now - b < store::SILENCE_MS - 1_000);
        if !alive {
            return Ok(());
        }
        let (name, beat) = (host.name.clone(), host.beat);
        let caps = supervisor::caps::caps_json(&host.config);
        self.fault("a daemon started under a live host's name elsewhere");
        let elsewhere = Place {
            machine: format!("copy-of-{name}"),
            state_dir_id: "copied".into(),
        };
        match self
            .store
            .take_over_from(&name, Some(&elsewhere), 1, "fleet.toml", &caps, self.now)
        {
            Err(StoreError::HostAlive { .. }) => Ok(()),
            Ok(epoch) => Err(self.violation(format!(
                "host {name}: a daemon of another place took its name over (epoch {epoch}) while it was alive, its heartbeat {} ms old",
                self.now - beat.unwrap_or(self.now)
            ))),
            Err(e) => Err(self.violation(format!(
                "host {name}: a take-over of its name from another place failed: {e}"
            ))),
        }
    }

    /// On a shared database, a host's machine is lost — its daemon and every shim die with it,
    /// their commands lost — and an operator runs `fleet hosts forget` for it (its runs end
    /// `lost`, retried elsewhere when their project allows); or a lost host comes back, and its
    /// next daemon takes its name over under a new epoch. The last host up is never lost.
    pub(crate) fn lose_or_bring_back(&mut self) -> Result<(), Failure> {
        if let Some(h) = self.hosts.iter().position(|host| host.down) {
            if self.rng.gen_bool(0.5) {
                self.fault("a lost host came back");
                self.hosts[h].down = false;
            }
            return Ok(());
        }
        let h = self.any_host();
        self.fault("a host lost, and forgotten");
        self.kill_daemon_now(h);
        let host = &mut self.hosts[h];
        host.zombie = None;
        host.down = true;
        for pid in host.world.live() {
            host.world.kill(pid);
        }
        let config = host.config.clone();
        let name = host.name.clone();
        let now = self.now;
        let plan = |run: &store::Run| {
            supervisor::retry::RetryPolicy::for_project(&config, &run.project).next(
                store::RunStatus::Lost,
                run.attempt,
                now,
            )
        };
        match self
            .store
            .forget_host(&name, "fleet-sim", &plan, &config.failure_hooks(), now)
        {
            Ok(_) | Err(StoreError::UnknownHost(_)) | Err(StoreError::AlreadyForgotten { .. }) => {
                Ok(())
            }
            Err(e) => Err(self.violation(format!("host {name}: `fleet hosts forget` failed: {e}"))),
        }
    }
}
