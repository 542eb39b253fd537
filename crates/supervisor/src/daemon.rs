//! The daemon: takes over a state directory, recovers what a previous daemon left, and runs the
//! EVAL loop — reap → recover/adopt → pack → claim → spawn — until SIGTERM or SIGINT.
//!
//! Shape of the loop. One task owns all daemon state ([`Daemon`]); nothing else mutates it, so
//! there are no locks around the slot pool. Shim tasks and the control socket only *send* to it.
//! An EVAL runs when a shim reports (started or exited), when a nudge arrives (enqueue, cancel,
//! reload), on the backstop tick, and when a delayed retry becomes due. Triggers that arrive
//! during an EVAL are coalesced into exactly one more.
//!
//! Every database call of an EVAL happens on a blocking thread (`spawn_blocking`), never on the
//! runtime, and an EVAL's writes are batched: one transaction for all transitions it reaps, one
//! for all claims it makes.
//!
//! Stopping the daemon (SIGTERM/SIGINT) stops the EVALs and leaves the shims running: they are
//! in their own sessions and hold their runs' locks, and the next daemon adopts them.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use packer::{merge, packer_for, Candidate, RunningSet};
use store::{
    now_ms, Applied, ClaimRequest, Millis, Run, RunId, RunStatus, Store, StoreError, Transition,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::config::Config;
use crate::control::Nudge;
use crate::fate::{self, Fate, RetryPolicy};
use crate::forkserver::{ForkServer, ForkServerError};
use crate::pool::{ShimIdentity, Slot, SlotPool};
use crate::runfiles::RunDir;
use crate::shim::ShimArgs;
use crate::statedir::{StateDir, StateDirError};

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The state directory is unusable or held by another daemon.
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// The database refused the takeover.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Setting up signals or the control socket failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being set up.
        what: String,
        /// What the system said.
        source: std::io::Error,
    },
}

/// What a shim task reports to the daemon.
#[derive(Debug)]
enum ShimEvent {
    /// The shim started the command.
    Running { run_id: RunId, token: u64, pid: i32 },
    /// The shim process is gone (its run files say how the run ended).
    Exited { run_id: RunId, token: u64 },
}

/// Options for [`run`].
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    /// The config file, re-read on reload.
    pub config_path: PathBuf,
    /// The program to run as `PROGRAM shim ARGS…` for each run (normally the fleet binary),
    /// when there is no fork server or it cannot be used.
    pub shim_program: PathBuf,
    /// The fork server that forks shims without an exec (see [`crate::forkserver`]); started by
    /// the caller while the process still had one thread. `None`: every shim is exec'd.
    pub fork_server: Option<Arc<ForkServer>>,
}

/// The caps of a config as the JSON kept in the daemon's row (read by `fleet status`).
pub fn caps_json(config: &Config) -> String {
    let caps = config.caps();
    let namespaces: serde_json::Map<String, serde_json::Value> = caps
        .namespaces
        .iter()
        .map(|(name, cap)| {
            (
                name.clone(),
                serde_json::json!({"max_concurrency": cap.max_concurrency, "weight": cap.weight}),
            )
        })
        .collect();
    serde_json::json!({"global": caps.global, "namespaces": namespaces}).to_string()
}

/// Runs the daemon until SIGTERM or SIGINT.
///
/// Errors: the state directory is unusable or held by another daemon (the caller exits 1,
/// naming the holder's pid), the database cannot be opened, or signal handlers or the control
/// socket cannot be set up. Once running, nothing a config edit, a busy database or a failing
/// command does makes it return.
pub async fn run(config: Config, options: DaemonOptions) -> Result<(), DaemonError> {
    // Reads FAILPOINTS (tests inject crashes by name); a no-op without the `failpoints` feature.
    let _failpoints = crate::failpoints::scenario().map_err(|e| DaemonError::Io {
        what: "FAILPOINTS".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })?;
    let state = StateDir::new(&config.state_dir);
    let _lock = state.lock_daemon()?;
    let store = {
        let state = state.clone();
        tokio::task::spawn_blocking(move || state.open_store())
            .await
            .expect("open_store panicked")?
    };
    let epoch = {
        let store = store.clone();
        let caps = caps_json(&config);
        let path = options.config_path.display().to_string();
        // Another program may hold the write lock as we start: wait it out, never give up.
        tokio::task::spawn_blocking(move || loop {
            match store.take_over(std::process::id() as i32, &path, &caps, now_ms()) {
                Err(e) if e.is_busy() => {
                    tracing::warn!(error = %e, "the database is busy; retrying the takeover");
                    std::thread::sleep(Duration::from_millis(500));
                }
                other => break other,
            }
        })
        .await
        .expect("take_over panicked")?
    };
    tracing::info!(epoch, state_dir = %state.root().display(), "took over the state directory");

    let (tx, rx) = mpsc::unbounded_channel();
    let notify = Arc::new(Notify::new());
    let reload = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listener = control_listener(&state, notify.clone(), reload.clone())?;
    // Edits of fleet.toml are noticed by themselves. A change only arms a timer: the reload
    // happens once the file has been quiet for RELOAD_SETTLE, so an editor caught between its
    // truncate and its write is not applied (a cut-off file can parse, and would cancel the
    // queued runs of every project it lost).
    let (edits_tx, mut edits) = mpsc::unbounded_channel::<()>();
    // FLEET_WATCH=0 turns the watcher off (filesystems where inotify misbehaves; tests that
    // must see SIGHUP or `fleet reload` alone do the work).
    let watching = std::env::var_os("FLEET_WATCH").is_none_or(|v| v != "0");
    let _watcher = if !watching {
        tracing::info!(
            "FLEET_WATCH=0: edits of the config are read on SIGHUP or `fleet reload` only"
        );
        None
    } else {
        match crate::watch::watch(&options.config_path, move || {
            let _ = edits_tx.send(());
        }) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the config file; use `fleet reload` or SIGHUP after edits");
                None
            }
        }
    };
    let fork_server = options.fork_server.clone();
    let mut daemon = Daemon {
        config: Arc::new(config),
        options,
        state,
        store,
        epoch,
        pool: SlotPool::new(),
        pending: Vec::new(),
        exited: Vec::new(),
        tx,
        rx,
        notify: notify.clone(),
        reload,
        backoff: None,
        next_due: None,
        fenced: None,
        reload_due: None,
        sweep_removed: true,
        recovered: false,
        fork_server,
        probe: None,
        last_eval: None,
    };
    let probe_store = daemon.store.clone();
    daemon.probe = match tokio::task::spawn_blocking(move || probe_store.change_probe())
        .await
        .expect("change_probe panicked")
    {
        Ok(p) => Some(Arc::new(std::sync::Mutex::new(p))),
        Err(e) => {
            tracing::warn!(error = %e, "cannot open the change probe; every tick runs an EVAL");
            None
        }
    };
    // An edit saved between the command line's read of the file and the watcher's start would
    // otherwise wait for the next edit: if the file no longer says what we were given, reload.
    let path = daemon.options.config_path.clone();
    let now_on_disk = tokio::task::spawn_blocking(move || Config::load(&path).ok())
        .await
        .expect("config load panicked");
    if now_on_disk.as_ref() != Some(&*daemon.config) {
        daemon.reload_due = Some(Instant::now() + RELOAD_SETTLE);
    }
    daemon.recover().await;

    let mut term = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut hup = signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut tick = tokio::time::interval(daemon.config.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let due = daemon.wake_at();
        let mut by_tick = false;
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: stopping; shims keep running and will be adopted"); break; }
            _ = int.recv() => { tracing::info!("SIGINT: stopping; shims keep running and will be adopted"); break; }
            _ = hup.recv() => { daemon.reload.store(true, std::sync::atomic::Ordering::SeqCst); }
            _ = tick.tick() => { by_tick = true; }
            _ = notify.notified() => {}
            Some(ev) = daemon.rx.recv() => { daemon.note(ev); }
            Some(()) = edits.recv() => { daemon.reload_due = Some(Instant::now() + RELOAD_SETTLE); }
            _ = sleep_until_opt(due) => {}
        }
        while edits.try_recv().is_ok() {
            daemon.reload_due = Some(Instant::now() + RELOAD_SETTLE);
        }
        if daemon.reload_due.is_some_and(|at| at <= Instant::now()) {
            daemon.reload_due = None;
            daemon
                .reload
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        while let Ok(ev) = daemon.rx.try_recv() {
            daemon.note(ev);
        }
        if daemon
            .reload
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            daemon.reload_config().await;
        }
        if tick.period() != daemon.config.tick {
            tick = tokio::time::interval(daemon.config.tick);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        if daemon
            .backoff
            .is_some_and(|(until, _)| Instant::now() < until)
        {
            continue;
        }
        if !daemon.recovered {
            // Recovery could not read the database at startup: nothing may be claimed before the
            // runs a previous daemon left are adopted or settled.
            daemon.recover().await;
            if !daemon.recovered {
                continue;
            }
        }
        if by_tick && daemon.nothing_changed().await {
            continue;
        }
        daemon.eval().await;
        if daemon.fenced.is_some() {
            break;
        }
    }
    listener.abort();
    if let Some(err) = daemon.fenced.take() {
        // The socket now belongs to the daemon that fenced us off: leave it.
        return Err(DaemonError::Store(err));
    }
    let _ = std::fs::remove_file(daemon.state.socket_path());
    Ok(())
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn signal(
    kind: tokio::signal::unix::SignalKind,
) -> Result<tokio::signal::unix::Signal, DaemonError> {
    tokio::signal::unix::signal(kind).map_err(|source| DaemonError::Io {
        what: "installing a signal handler".into(),
        source,
    })
}

/// Listens on the control socket; each line is a [`Nudge`].
fn control_listener(
    state: &StateDir,
    notify: Arc<Notify>,
    reload: Arc<std::sync::atomic::AtomicBool>,
) -> Result<tokio::task::JoinHandle<()>, DaemonError> {
    let path = state.socket_path();
    // We hold the daemon lock, so a socket file left here belongs to a dead daemon.
    let _ = std::fs::remove_file(&path);
    let bind = || {
        let (address, _folder) = crate::control::addressable(&path)?;
        tokio::net::UnixListener::bind(&address)
    };
    let listener = bind().map_err(|source| DaemonError::Io {
        what: format!("binding the control socket {}", path.display()),
        source,
    })?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let notify = notify.clone();
            let reload = reload.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    match Nudge::parse(&line) {
                        Some(Nudge::Eval) => notify.notify_one(),
                        Some(Nudge::Reload) => {
                            reload.store(true, std::sync::atomic::Ordering::SeqCst);
                            notify.notify_one();
                        }
                        None => tracing::warn!(line, "unknown message on the control socket"),
                    }
                }
            });
        }
    }))
}

/// All the state of one daemon process. Owned by the loop task alone.
struct Daemon {
    config: Arc<Config>,
    options: DaemonOptions,
    state: StateDir,
    store: Store,
    epoch: i64,
    pool: SlotPool,
    /// Transitions decided but not yet in the database (it was busy). They are written before
    /// any new claim, and their slots stay in the pool — and so in the running set — until then.
    pending: Vec<Transition>,
    /// Shims that exited since the last EVAL: (run, token).
    exited: Vec<(RunId, u64)>,
    tx: mpsc::UnboundedSender<ShimEvent>,
    rx: mpsc::UnboundedReceiver<ShimEvent>,
    notify: Arc<Notify>,
    reload: Arc<std::sync::atomic::AtomicBool>,
    /// After a failed EVAL (busy database): no EVAL before this instant; the wait doubles.
    backoff: Option<(Instant, Duration)>,
    /// The earliest instant a delayed (retry) run becomes claimable.
    next_due: Option<Instant>,
    /// Set when the store refused a write because a newer epoch took over: the loop stops.
    fenced: Option<StoreError>,
    /// A noticed edit of fleet.toml is reloaded at this instant (see [`RELOAD_SETTLE`]).
    reload_due: Option<Instant>,
    /// The next EVAL looks for queued runs of every project missing from the config (set at
    /// startup and after each config change).
    sweep_removed: bool,
    /// Startup recovery has run to the end (it is retried, with backoff, until it has).
    recovered: bool,
    /// Where shims are forked; `None` once it failed (shims are exec'd from then on).
    fork_server: Option<Arc<ForkServer>>,
    /// Tells a tick whether anything was committed since it last looked (see
    /// [`Daemon::nothing_changed`]); `None` if it could not be opened (every tick EVALs).
    probe: Option<Arc<std::sync::Mutex<store::ChangeProbe>>>,
    /// When the last EVAL ran, on both clocks (to notice a step of the wall clock).
    last_eval: Option<(Instant, std::time::SystemTime)>,
}

/// A tick runs a full EVAL at least this often, even when nothing seems to have changed.
pub const FULL_EVAL_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// How long fleet.toml must stay unchanged after a noticed edit before it is re-read.
pub const RELOAD_SETTLE: Duration = Duration::from_millis(300);

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

impl Daemon {
    fn wake_at(&self) -> Option<Instant> {
        // While backing off, nothing is due before the backoff ends.
        let work = match self.backoff {
            Some((until, _)) => Some(until),
            None => self.next_due,
        };
        match (work, self.reload_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn note(&mut self, ev: ShimEvent) {
        match ev {
            ShimEvent::Running { run_id, token, pid } => {
                self.pending.push(Transition {
                    run_id,
                    token,
                    change: store::Change::Running { pid: Some(pid) },
                });
            }
            ShimEvent::Exited { run_id, token } => self.exited.push((run_id, token)),
        }
    }

    fn policy(&self, project: &str) -> RetryPolicy {
        match self.config.projects.get(project) {
            Some(p) => RetryPolicy {
                retries: p.retries,
                backoff_ms: p.retry_backoff.as_millis() as u64,
            },
            None => RetryPolicy {
                retries: 0,
                backoff_ms: 0,
            },
        }
    }

    /// Startup recovery, before the first EVAL: settle every run the database records as
    /// active. Alive ⇒ adopt; ended ⇒ its real status; never started ⇒ tombstone and requeue;
    /// unknown ⇒ lost (retried if attempts remain). Run files the database does not hold as
    /// active are reported, never acted on.
    async fn recover(&mut self) {
        let store = self.store.clone();
        let state = self.state.clone();
        let policies: BTreeMap<String, RetryPolicy> = self
            .config
            .projects
            .keys()
            .map(|p| (p.clone(), self.policy(p)))
            .collect();
        let result = tokio::task::spawn_blocking(move || -> Result<_, StoreError> {
            let now = now_ms();
            let active = store.active_runs()?;
            let mut adopt = Vec::new();
            let mut transitions = Vec::new();
            for run in &active {
                let dir = RunDir::new(state.root(), run.id);
                let fate = match fate::settle(&dir, run.claim_token) {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::error!(run = run.id, error = %e, "cannot read the run's files; leaving it active");
                        continue;
                    }
                };
                if fate == Fate::Alive {
                    let started = dir.read_started().ok().flatten().filter(|s| s.token == run.claim_token);
                    if run.status == RunStatus::Starting {
                        if let Some(r) = dir.read_running().ok().flatten().filter(|r| r.token == run.claim_token) {
                            transitions.push(Transition {
                                run_id: run.id,
                                token: run.claim_token,
                                change: store::Change::Running { pid: Some(r.pid) },
                            });
                        }
                    }
                    adopt.push((run.clone(), started.map(|s| ShimIdentity { pid: s.shim_pid, start_time: s.shim_start_time })));
                    continue;
                }
                let policy = policies.get(&run.project).copied().unwrap_or(RetryPolicy { retries: 0, backoff_ms: 0 });
                tracing::info!(run = run.id, project = %run.project, fate = ?fate, "recovered");
                if let Some(t) = fate::transition(run.id, run.claim_token, run.attempt, &fate, policy, now) {
                    transitions.push(t);
                }
            }
            let active_ids: std::collections::BTreeSet<RunId> = active.iter().map(|r| r.id).collect();
            if let Ok(ids) = crate::runfiles::list_run_ids(state.root()) {
                for id in ids {
                    if active_ids.contains(&id) {
                        continue;
                    }
                    let dir = RunDir::new(state.root(), id);
                    if dir.is_locked().unwrap_or(false) {
                        tracing::warn!(run = id, "a live shim holds a run the database does not record as active; left alone (see `fleet check`)");
                    }
                }
            }
            Ok((adopt, transitions))
        })
        .await
        .expect("recovery panicked");
        match result {
            Ok((adopt, transitions)) => {
                for (run, shim) in adopt {
                    tracing::info!(run = run.id, project = %run.project, "adopted a live run");
                    self.pool.insert(Slot {
                        run_id: run.id,
                        project: run.project.clone(),
                        namespace: run.namespace.clone(),
                        token: run.claim_token,
                        attempt: run.attempt,
                        shim,
                        cancel_sent: false,
                        adopted: true,
                    });
                    self.watch_adopted(run.id, run.claim_token);
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
                tracing::error!(error = %e, retry_in = ?wait, "recovery could not read the database; retrying");
                self.backoff = Some((Instant::now() + wait, wait));
            }
        }
    }

    /// Waits, on a plain thread, for an adopted run's shim to release its lock, then reports it
    /// exited. A plain thread, not the blocking pool: it may wait for days, and must never hold
    /// up the runtime's shutdown.
    fn watch_adopted(&self, run_id: RunId, token: u64) {
        let dir = RunDir::new(self.state.root(), run_id);
        let tx = self.tx.clone();
        let _ = std::thread::Builder::new()
            .name(format!("adopted-{run_id}"))
            .spawn(move || {
                if let Ok(lock) = dir.lock_blocking() {
                    drop(lock);
                }
                let _ = tx.send(ShimEvent::Exited { run_id, token });
            });
    }

    async fn reload_config(&mut self) {
        let path = self.options.config_path.clone();
        let loaded = tokio::task::spawn_blocking(move || Config::load(&path))
            .await
            .expect("config load panicked");
        let (caps, error) = match loaded {
            Ok(new) if new.state_dir != self.config.state_dir => {
                let msg = format!(
                    "{}: state_dir: changing the state directory needs a daemon restart; the rest of this edit is not applied",
                    self.options.config_path.display()
                );
                tracing::error!("{msg}");
                (caps_json(&self.config), Some(msg))
            }
            Ok(new) => {
                if new != *self.config {
                    tracing::info!("reloaded {}", self.options.config_path.display());
                    self.config = Arc::new(new);
                    self.sweep_removed = true;
                }
                (caps_json(&self.config), None)
            }
            Err(errors) => {
                let msg = errors.to_string();
                tracing::error!("reload refused, the last good config stays in force: {msg}");
                (caps_json(&self.config), Some(msg))
            }
        };
        let store = self.store.clone();
        let epoch = self.epoch;
        let res = tokio::task::spawn_blocking(move || {
            store.set_daemon_config(epoch, &caps, error.as_deref(), now_ms())
        })
        .await
        .expect("set_daemon_config panicked");
        if let Err(e) = res {
            tracing::warn!(error = %e, "could not record the reload in the database");
        }
    }

    /// Whether a tick may skip its EVAL: nothing is waiting in memory (transitions, exited
    /// shims, a backoff), nothing was committed to the database since the last look (by this
    /// daemon, a command that did not nudge, or any other program), the wall clock has not been
    /// stepped (schedules and retries are timed on it), and a full EVAL ran less than
    /// [`FULL_EVAL_AT_LEAST_EVERY`] ago. Everything else that needs an EVAL (shim reports,
    /// nudges, edits, a due retry or occurrence) wakes the loop by itself, not by the tick.
    ///
    /// Why: an idle daemon with a thousand projects spent about 1 % of a core on EVALs that
    /// found nothing to do (docs/PERFORMANCE.md, idle measure).
    async fn nothing_changed(&self) -> bool {
        let Some((at, wall)) = self.last_eval else {
            return false;
        };
        if !self.pending.is_empty()
            || !self.exited.is_empty()
            || self.backoff.is_some()
            || at.elapsed() >= FULL_EVAL_AT_LEAST_EVERY
        {
            return false;
        }
        let mono = at.elapsed();
        let stepped = match std::time::SystemTime::now().duration_since(wall) {
            Ok(w) => w.abs_diff(mono) > Duration::from_secs(1),
            Err(_) => true,
        };
        if stepped {
            return false;
        }
        let Some(probe) = self.probe.clone() else {
            return false;
        };
        let changed = tokio::task::spawn_blocking(move || {
            let mut p = probe.lock().unwrap_or_else(|e| e.into_inner());
            p.changed()
        })
        .await
        .expect("change probe panicked");
        // A probe that cannot read says nothing: EVAL, which reports the error properly.
        matches!(changed, Ok(false))
    }

    /// One EVAL: reap → pack → claim (blocking thread) → spawn → cancel (here).
    async fn eval(&mut self) {
        self.last_eval = Some((Instant::now(), std::time::SystemTime::now()));
        let exited = std::mem::take(&mut self.exited);
        let mut batch = std::mem::take(&mut self.pending);
        let slots: BTreeMap<RunId, (u64, u32, String)> = self
            .pool
            .iter()
            .map(|s| (s.run_id, (s.token, s.attempt, s.project.clone())))
            .collect();
        let policies: BTreeMap<String, RetryPolicy> = slots
            .values()
            .map(|(_, _, p)| (p.clone(), self.policy(p)))
            .collect();
        let live = self.pool.running_set();
        let sweep_removed = self.sweep_removed;
        let config = self.config.clone();
        let store = self.store.clone();
        let state = self.state.clone();
        let epoch = self.epoch;

        let (outcome, still_alive, still_locked) = tokio::task::spawn_blocking(move || {
            let now = now_ms();
            // Reap: settle the shims that exited.
            let mut still_alive = Vec::new();
            let mut still_locked = Vec::new();
            for (run_id, token) in exited {
                let Some((slot_token, attempt, project)) = slots.get(&run_id) else {
                    continue;
                };
                if *slot_token != token {
                    continue;
                }
                let dir = RunDir::new(state.root(), run_id);
                match fate::settle(&dir, token) {
                    // The shim's report pipe can reach end-of-file an instant before the kernel
                    // drops its lock (a crashed shim's descriptors close in order): wait for the
                    // lock, as for an adopted run.
                    Ok(Fate::Alive) => still_locked.push((run_id, token)),
                    Ok(f) => {
                        let policy = policies[project];
                        batch.extend(fate::transition(run_id, token, *attempt, &f, policy, now));
                    }
                    Err(e) => {
                        tracing::error!(run = run_id, error = %e, "cannot read the run's files; will look again");
                        still_alive.push((run_id, token));
                    }
                }
            }
            fail::fail_point!("daemon-before-finalize", |_| std::process::abort());
            (
                eval_blocking(&store, epoch, &config, batch, live, sweep_removed, now),
                still_alive,
                still_locked,
            )
        })
        .await
        .expect("EVAL panicked");
        fail::fail_point!("daemon-after-finalize", |_| std::process::abort());

        self.exited.extend(still_alive);
        for (run_id, token) in still_locked {
            self.watch_adopted(run_id, token);
        }
        for (run_id, applied) in &outcome.applied {
            match applied {
                Applied::Done { status, retry } => {
                    if status.is_terminal() || *status == RunStatus::Queued {
                        self.pool.remove(*run_id);
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
                            self.pool.remove(*run_id);
                        }
                    }
                }
            }
        }
        if let Some((err, unapplied)) = outcome.failed {
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
        self.cancel(&outcome.db_active);
    }

    async fn store_get(&self, id: RunId) -> Result<Run, StoreError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.get_run(id))
            .await
            .expect("get_run panicked")
    }

    /// Signals the shims of runs whose cancel was requested (once each). The status changes only
    /// when the shim reports the process gone.
    fn cancel(&mut self, db_active: &[Run]) {
        for run in db_active.iter().filter(|r| r.cancel_requested) {
            let Some(slot) = self.pool.get_mut(run.id) else {
                continue;
            };
            if slot.cancel_sent {
                continue;
            }
            if slot.shim.is_none() {
                // Adopted before its shim had written `started`, or forked without an answer
                // from the fork server: the shim has written it by now, if it lives.
                slot.shim = RunDir::new(self.state.root(), run.id)
                    .read_started()
                    .ok()
                    .flatten()
                    .filter(|s| s.token == slot.token)
                    .map(|s| ShimIdentity {
                        pid: s.shim_pid,
                        start_time: s.shim_start_time,
                    });
            }
            match slot.shim {
                Some(shim) if shim.signal(libc::SIGTERM) => {
                    tracing::info!(run = run.id, "cancel: sent SIGTERM to the run's shim");
                    slot.cancel_sent = true;
                }
                // Not spawned yet, or not ours to identify: try again next EVAL.
                _ => {}
            }
        }
    }

    /// Starts the shim of a claimed run. The claim is already committed, so a crash from here on
    /// is found by recovery: no started record ⇒ requeue; started ⇒ adopt or lost.
    fn spawn(&mut self, run: Run) {
        fail::fail_point!("daemon-after-claim", |_| std::process::abort());
        let mut slot = Slot {
            run_id: run.id,
            project: run.project.clone(),
            namespace: run.namespace.clone(),
            token: run.claim_token,
            attempt: run.attempt,
            shim: None,
            cancel_sent: false,
            adopted: false,
        };
        let Some(project) = self.config.projects.get(&run.project) else {
            // Removed between pack and spawn: cannot happen within one EVAL, but never panic.
            self.pending.push(Transition {
                run_id: run.id,
                token: run.claim_token,
                change: store::Change::Requeue {
                    reason: "project not in the config at spawn".into(),
                },
            });
            self.pool.insert(slot);
            return;
        };
        let mut env: Vec<(OsString, Option<OsString>)> = project
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), Some(OsString::from(v))))
            .collect();
        for (k, v) in [
            ("FLEET_RUN_ID", run.id.to_string()),
            ("FLEET_PROJECT", run.project.clone()),
            ("FLEET_NAMESPACE", run.namespace.clone()),
            ("FLEET_ATTEMPT", run.attempt.to_string()),
        ] {
            env.push((k.into(), Some(v.into())));
        }
        // Removed when absent: the daemon may itself run under a scheduled fleet run.
        env.push((
            "FLEET_OCCURRENCE".into(),
            run.occurrence.map(|o| store::rfc3339(o).into()),
        ));
        let args = ShimArgs {
            state_dir: self.state.root().to_path_buf(),
            run_id: run.id,
            token: run.claim_token,
            timeout: project.timeout,
            kill_grace: project.kill_grace,
            cwd: project.cwd.clone(),
            argv: project.command.iter().map(OsString::from).collect(),
            env,
        };
        let (run_id, token) = (run.id, run.claim_token);
        let tx = self.tx.clone();
        match self.fork_shim(&args) {
            Forked::Pid(pid, report) => {
                slot.shim = crate::runfiles::proc_start_time(pid)
                    .map(|start_time| ShimIdentity { pid, start_time });
                fail::fail_point!("daemon-after-spawn", |_| std::process::abort());
                self.pool.insert(slot);
                tokio::spawn(watch_shim(report, None, run_id, token, tx));
                return;
            }
            Forked::Unknown(report) => {
                // A shim may exist: never start a second one for this claim. The pipe's
                // end-of-file comes when it ends (or at once if none was forked), and the run
                // files then say which (no `started` record: tombstone and requeue).
                self.pool.insert(slot);
                tokio::spawn(watch_shim(report, None, run_id, token, tx));
                return;
            }
            Forked::No => {}
        }
        let mut cmd = tokio::process::Command::new(&self.options.shim_program);
        cmd.arg("shim")
            .args(args.to_args())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(false);
        // The exec'd shim gets the command's environment as its own (never on its command line,
        // which anyone can read).
        for (key, value) in &args.env {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        // SAFETY: setsid is async-signal-safe. Its own session keeps the shim alive through a
        // daemon crash and out of reach of signals sent to the daemon's terminal.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let reason = format!(
                    "could not start the shim {}: {e}",
                    self.options.shim_program.display()
                );
                tracing::error!(run = run.id, "{reason}");
                self.pending.push(Transition {
                    run_id: run.id,
                    token: run.claim_token,
                    change: store::Change::Finish {
                        status: RunStatus::Failed,
                        exit_code: None,
                        signal: None,
                        reason: Some(reason),
                        retry: None,
                        finished_at: None,
                    },
                });
                self.pool.insert(slot);
                self.notify.notify_one();
                return;
            }
        };
        fail::fail_point!("daemon-after-spawn", |_| std::process::abort());
        if let Some(pid) = child.id() {
            let pid = pid as i32;
            slot.shim = crate::runfiles::proc_start_time(pid)
                .map(|start_time| ShimIdentity { pid, start_time });
        }
        self.pool.insert(slot);
        match child.stdout.take() {
            Some(stdout) => {
                tokio::spawn(watch_shim(stdout, Some(child), run_id, token, tx));
            }
            None => {
                tokio::spawn(watch_shim(
                    tokio::io::empty(),
                    Some(child),
                    run_id,
                    token,
                    tx,
                ));
            }
        }
    }

    /// Starts the shim through the fork server, if there is one and it still works.
    fn fork_shim(&mut self, args: &ShimArgs) -> Forked {
        let Some(server) = self.fork_server.clone() else {
            return Forked::No;
        };
        let (read, write) = match report_pipe() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "could not create a shim's report pipe; exec'ing it");
                return Forked::No;
            }
        };
        let reader = match tokio::net::unix::pipe::Receiver::from_owned_fd(read) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "could not watch a shim's report pipe; exec'ing it");
                return Forked::No;
            }
        };
        match server.spawn(args, write) {
            Ok(pid) => Forked::Pid(pid, reader),
            // Only this request is refused; the server stays in use.
            Err(e @ (ForkServerError::ForkFailed(_) | ForkServerError::TooLarge(_))) => {
                tracing::warn!(run = args.run_id, error = %e, "exec'ing this run's shim instead");
                Forked::No
            }
            Err(e) => {
                tracing::error!(
                    run = args.run_id,
                    error = %e,
                    "the fork server is gone; every shim from now on is exec'd"
                );
                self.fork_server = None;
                server.kill();
                match e {
                    ForkServerError::Unknown(_) => Forked::Unknown(reader),
                    _ => Forked::No,
                }
            }
        }
    }
}

/// How [`Daemon::fork_shim`] went.
enum Forked {
    /// The fork server forked the shim: its pid, and the pipe it reports on.
    Pid(i32, tokio::net::unix::pipe::Receiver),
    /// The request may or may not have forked a shim: only the pipe is known.
    Unknown(tokio::net::unix::pipe::Receiver),
    /// No shim was forked: exec one.
    No,
}

/// A close-on-exec pipe: (read end, write end).
fn report_pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just created and belong to nobody else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// Follows one shim this daemon started: its `running PID` line, then its end — the report
/// pipe's end-of-file (every copy of the write end is the shim's), and for an exec'd shim, which
/// is our child, its exit status too (so it is reaped).
async fn watch_shim(
    report: impl tokio::io::AsyncRead + Unpin,
    child: Option<tokio::process::Child>,
    run_id: RunId,
    token: u64,
    tx: mpsc::UnboundedSender<ShimEvent>,
) {
    let mut lines = BufReader::new(report).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(pid) = line
            .strip_prefix("running ")
            .and_then(|p| p.trim().parse().ok())
        {
            let _ = tx.send(ShimEvent::Running { run_id, token, pid });
        }
    }
    if let Some(mut child) = child {
        let _ = child.wait().await;
    }
    let _ = tx.send(ShimEvent::Exited { run_id, token });
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
                for (t, a) in batch.iter().zip(applied) {
                    if let Applied::Done { status, .. } = &a {
                        if !status.is_active() {
                            // Gone from the database's running set: gone from the pool's too.
                            live = live
                                .iter()
                                .filter(|r| r.run_id != t.run_id)
                                .cloned()
                                .collect();
                        }
                    }
                    out.applied.push((t.run_id, a));
                }
            }
            Err(e) => {
                out.failed = Some((e, batch));
                return out;
            }
        }
    }
    let mut step = || -> Result<(), StoreError> {
        // Fire due schedule occurrences before packing, so a fired run can start in this EVAL.
        out.next_occurrence = crate::firing::fire_schedules(store, epoch, config, now)?;
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
        // The brief's failure 1: the packers see the merge, never the pool alone.
        let running = merge(&live, &persisted);
        let caps = config.caps();
        let heads = store.queue_heads(now)?;
        for h in heads
            .iter()
            .filter(|h| !config.projects.contains_key(&h.project))
        {
            cancel_removed(store, &h.project, now)?;
        }
        let candidates: Vec<Candidate> = heads
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
            .collect();
        let picks = packer_for(&caps).pack(&caps, &running, &candidates);
        out.db_active = db;
        // Read before the claim: once runs are claimed, nothing may stop them being spawned.
        out.next_not_before = store.next_not_before(now)?;
        if !picks.is_empty() {
            let requests: Vec<ClaimRequest> = picks
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
                .collect();
            let claimed = store.claim(epoch, &requests, now)?;
            for c in &claimed {
                out.db_active.push(c.run.clone());
            }
            out.claimed = claimed.into_iter().map(|c| c.run).collect();
        }
        Ok(())
    };
    if let Err(e) = step() {
        out.failed = Some((e, Vec::new()));
    }
    out
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

/// The path of a run's log, for `fleet logs`.
pub fn log_path(state_dir: &Path, run_id: RunId) -> PathBuf {
    RunDir::new(state_dir, run_id).log_path()
}
