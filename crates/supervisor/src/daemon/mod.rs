//! The daemon: takes over a state directory, recovers what a previous daemon left, and runs the
//! EVAL loop — reap → recover/adopt → fire schedules → pack → claim → spawn — until SIGTERM or
//! SIGINT.
//!
//! One folder, one file per phase, in the order a run meets them:
//! - this file: [`run`], the setup — take the state directory over, start listening, hand over
//!   to the loop — and the teardown;
//! - `listener`: the control socket, signals and config edits, turned into events;
//! - `events`: the one channel into the loop, and its closed set of events;
//! - `event_loop`: when to EVAL (coalescing triggers, the tick, timers, reloads);
//! - `recover`: startup recovery and adoption of the runs a previous daemon left;
//! - `reload`: re-reading fleet.toml, and whether the config in force is what the file says;
//! - `config_file`: fleet.toml as the file system shows it (its version, whether an edit has
//!   settled), which the state holds and `reload` decides on;
//! - `eval`: one EVAL, and [`eval_blocking`], its database half; `heads`, the queue heads it
//!   packs and the claims it makes of the picks;
//! - `spawn`: starting a claimed run's shim;
//! - `follow`: following a shim (its report pipe, its run's lock), turned into events;
//! - `prune_step`: now and then, pruning ended runs by the retention keys, off the loop;
//! - `cancel`: signalling the shims of runs whose cancel was requested;
//! - `turn`: the loop's record of a completed turn (the heartbeat, the service manager);
//! - `state`: the fields of the daemon's in-memory state, owned by the loop task alone, and
//!   (below it) the types of the fields a phase keeps.
//!
//! Stopping the daemon (SIGTERM/SIGINT) stops the EVALs and leaves the shims running: they are
//! in their own sessions and hold their runs' locks, and the next daemon adopts them. The setup
//! must never claim or spawn anything itself: nothing may start before recovery has settled what
//! a previous daemon left.

mod cancel;
mod config_file;
mod connect;
mod eval;
mod event_loop;
mod events;
mod follow;
mod heads;
mod hook_env;
mod hosts;
mod listener;
mod notify;
mod outage;
mod prune_step;
mod reap;
mod recover;
mod refused;
mod reload;
mod spawn;
mod state;
mod turn;
mod unreadable;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use config::Config;
use fleet_http::Observed;
use health::Health;
use store::{now_ms, StoreError};
use tokio::time::Instant;

pub use eval::{eval_blocking, EvalGates, EvalOutcome};
pub use state::refused::ClaimBackoff;

use crate::caps::caps_json;
use crate::shim::forkserver::ForkServer;
use crate::slots::SlotPool;
use crate::statedir::{StateDir, StateDirError};
use state::Daemon;

/// How many of the highest run ids with files here a starting daemon checks the database's
/// numbering against: an id too far past it is a stray file's name, and the next is tried.
const RESERVE_TRIES: usize = 16;

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The state directory is unusable or held by another daemon.
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// The database refused the takeover, or a newer daemon fenced this one off.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The `http_listen` address could not be bound (in use, not local, no permission).
    #[error("http_listen: cannot listen on {address}: {source}")]
    Http {
        /// The address, as configured.
        address: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// Setting up signals or the control socket failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being set up.
        what: String,
        /// What the system said.
        source: std::io::Error,
    },
}

/// Options for [`run`].
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    /// The config file, re-read on reload.
    pub config_path: PathBuf,
    /// The program to run as `PROGRAM shim ARGS…` for each run (normally the fleet binary),
    /// when there is no fork server or it cannot be used.
    pub shim_program: PathBuf,
    /// The fork server that forks shims without an exec (see [`crate::shim::forkserver`]); started by
    /// the caller while the process still had one thread. `None`: every shim is exec'd.
    pub fork_server: Option<Arc<ForkServer>>,
    /// The shape of the shims' own log lines: the daemon's log's, as chosen at start.
    pub shim_log: crate::shim::log::ShimLog,
    /// `fleet daemon --host`: the daemon's host name, over the config's (a valid host name);
    /// `None`: the config's [`Config::host`]. Kept for the daemon's life, across reloads.
    pub host: Option<String>,
}

/// Runs the daemon until SIGTERM or SIGINT.
///
/// Errors: the state directory is unusable or held by another daemon (the caller exits 1,
/// naming the holder's pid), the database cannot be opened, or signal handlers or the control
/// socket cannot be set up; and, once running, a newer daemon fenced this one off
/// ([`DaemonError::Store`]), or the state directory, its database or its lock was removed or
/// replaced under it ([`StateDirError::Replaced`], noticed within a tick). Nothing a config
/// edit, a busy database or a failing command does makes it return.
pub async fn run(config: Config, options: DaemonOptions) -> Result<(), DaemonError> {
    let host_flag = options.host.is_some();
    let config = match options.host {
        Some(host) => config.for_host(host),
        None => config,
    };
    // Reads FAILPOINTS (tests inject crashes by name); a no-op without the `failpoints` feature.
    let _failpoints = crate::failpoints::scenario().map_err(|e| DaemonError::Io {
        what: "FAILPOINTS".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })?;
    // Caught from here on, so that a stop asked for during the start is a clean stop (see
    // `listener::Signals`); the loop hears of it at its first turn.
    let mut signals = listener::Signals::install().map_err(|source| DaemonError::Io {
        what: "installing a signal handler".into(),
        source,
    })?;
    let state = StateDir::of(&config);
    let mut lock = state.lock_daemon()?;
    // A socket file here now is a dead daemon's (the lock is ours): gone at once, so that until
    // this daemon has taken over and bound its own, nobody takes that file for a daemon in
    // charge.
    let _ = std::fs::remove_file(state.socket_path());
    // Counted from the start: a takeover that lasts (a database that stays busy) counts
    // against the first turn.
    let health = Arc::new(Health::new(config.tick, now_ms()));
    // Bound before the database is touched: an address that cannot be bound stops the daemon
    // here, before it took an epoch or made a host row that would then stay in `fleet hosts`
    // for a host that never ran. Served once the takeover is done (below).
    let bound = match &config.http_listen {
        Some(listen) => {
            Some(
                fleet_http::bind(listen)
                    .await
                    .map_err(|source| DaemonError::Http {
                        address: listen.to_string(),
                        source,
                    })?,
            )
        }
        None => None,
    };
    // The highest run id with files here, read while the database opens and is taken over
    // (a folder of many runs takes a few milliseconds to list): new runs are numbered above
    // it before anything is fired or claimed (below).
    let run_ids = {
        let root = state.root().to_path_buf();
        tokio::task::spawn_blocking(move || {
            runrecord::highest_run_ids(&root, RESERVE_TRIES).map_err(|e| (root, e))
        })
    };
    let Some(store) = connect::open_store(&state, &mut signals).await? else {
        if let Some(listen) = &config.http_listen {
            fleet_http::remove_socket(listen);
        }
        return Ok(());
    };
    // Only once the database opened: a daemon refused at its start (a database written by a
    // newer fleet, say) never ran, and the commands must not take its host name for the one
    // this state directory last ran as.
    lock.record_host(&config.host, state.database().map(|d| d.target()));
    let epoch = {
        let store = store.clone();
        let caps = caps_json(&config);
        let path = options.config_path.display().to_string();
        let host = config.host.clone();
        // Another program may hold the write lock as we start: wait it out, never give up.
        tokio::task::spawn_blocking(move || loop {
            match store.take_over(&host, std::process::id() as i32, &path, &caps, now_ms()) {
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
    tracing::info!(epoch, host = %config.host, state_dir = %state.root().display(), store = %state.store_location(), "took over the state directory");
    // A database made before incremental vacuum gives its pages back only after one VACUUM.
    // Here, before recovery and the first claim, its pause (the write lock, about a second
    // per 100 MB, once in the database's life) delays nothing.
    {
        let store = store.clone();
        match tokio::task::spawn_blocking(move || store.enable_incremental_vacuum()).await {
            Ok(Ok(true)) => tracing::info!("the database now gives pruned space back"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not enable incremental vacuum; trying at the next start")
            }
            Err(e) => tracing::warn!(error = %e, "enabling incremental vacuum panicked"),
        }
    }
    // New runs are numbered above every run with files here, before anything is inserted or
    // claimed: a database restored from an older backup would otherwise hand a new run the id,
    // and so the lock file, records and log, of a run of the history it lost.
    {
        let ids = match run_ids.await.expect("listing runs/ panicked") {
            Ok(ids) => ids,
            Err((root, e)) => {
                tracing::warn!(error = %e, path = %root.join(runrecord::RUNS_DIR).display(), "cannot list the run files; new run ids are not checked against them");
                Vec::new()
            }
        };
        let store = store.clone();
        // Highest first; an id too far past the database's to be a run it lost is a stray
        // file's name: said, and the next one tried (a few at most: past that, the database
        // keeps its own numbering).
        let outcomes = tokio::task::spawn_blocking(move || {
            let mut outcomes = Vec::new();
            for highest in ids.into_iter().rev().take(RESERVE_TRIES) {
                let reserved = loop {
                    match store.reserve_run_ids(highest) {
                        Err(e) if e.is_busy() => {
                            tracing::warn!(error = %e, "the database is busy; retrying the run id check");
                            std::thread::sleep(Duration::from_millis(500));
                        }
                        other => break other?,
                    }
                };
                outcomes.push((reserved, highest));
                if !matches!(reserved, store::Reserved::TooFar { .. }) {
                    break;
                }
            }
            Ok::<_, store::StoreError>(outcomes)
        })
        .await
        .expect("reserve_run_ids panicked")?;
        for (reserved, highest) in outcomes {
            match reserved {
                store::Reserved::Moved { from } => tracing::warn!(
                    next_id = from,
                    run_ids = highest,
                    "the database would have numbered new runs from {from}, but runs up to {highest} have files here (a database restored from an older backup?): new runs are numbered from {}; `fleet check` lists the files no run explains",
                    highest.saturating_add(1)
                ),
                store::Reserved::TooFar { next } => tracing::warn!(
                    next_id = next,
                    run_ids = highest,
                    "files of a run {highest} are here, more than {} past the next run id ({next}): taken for a stray file, not numbered past; see `fleet check`",
                    store::MAX_RESERVE_JUMP
                ),
                store::Reserved::Ahead => {}
            }
        }
    }
    // The boot this daemon claims in, on disk before its first claim, and the last daemon's,
    // read first: recovery needs both to tell a claim that never started from one whose
    // `started` record a restart of the machine lost (see `crate::boot`).
    let boots = {
        let root = state.root().to_path_buf();
        tokio::task::spawn_blocking(move || crate::boot::Boots::take(&root, epoch))
            .await
            .expect("recording the boot panicked")
            .map_err(|source| DaemonError::Io {
                what: format!(
                    "writing {}",
                    state.root().join(crate::boot::BOOT_FILE).display()
                ),
                source,
            })?
    };
    // What was opened, to notice at every tick a state directory removed or replaced under us.
    let opened = state.opened(&lock)?;

    // Bound once the takeover is done: its presence tells commands (and scripts) that the
    // daemon is in charge; `fleet status` meanwhile finds a lock holder that does not answer.
    let (events, inbox) = events::channel();
    let socket = state.socket_path();
    let control =
        listener::control_socket(&socket, events.clone(), health.clone()).map_err(|source| {
            DaemonError::Io {
                what: format!("binding the control socket {}", socket.display()),
                source,
            }
        })?;
    let tick = config.tick;
    let _watcher = listener::config_edits(&options.config_path, events.clone());
    let config = Arc::new(config);
    let observed = Arc::new(Observed::new(
        health.clone(),
        epoch,
        store.clone(),
        state.root().to_path_buf(),
        config.clone(),
    ));
    // Served after the takeover, so that what it serves is this daemon's; before recovery, so
    // that /healthz answers while recovery runs. (Bound at the start: a listener the operator
    // asked for never goes missing silently.)
    let http = match (bound, &config.http_listen) {
        (Some(bound), Some(listen)) => {
            tracing::info!(address = %bound.address(), "serving HTTP (/metrics, /healthz, /api/, /)");
            let reachable = bound.reachable_at(&config.host);
            Some((
                fleet_http::serve(bound, observed.clone()),
                listen.clone(),
                reachable,
            ))
        }
        _ => None,
    };
    let http_addr = http.as_ref().and_then(|(_, _, at)| at.clone());
    let mut daemon = Daemon {
        config,
        host_flag,
        http_addr,
        config_path: options.config_path,
        shim_program: options.shim_program,
        shim_log: options.shim_log,
        fork_server: options.fork_server,
        state,
        store,
        epoch,
        boots,
        slots: SlotPool::new(),
        pending: Vec::new(),
        exited: Vec::new(),
        reap_failures: Default::default(),
        unreadable_rows: Default::default(),
        refused: Default::default(),
        events: events.clone(),
        backoff: None,
        outage: None,
        unkept_tails: Vec::new(),
        reconcile_due: false,
        spawn_hold: None,
        next_due: None,
        fenced: None,
        sweep_removed: true,
        fire_backoff: Default::default(),
        claim_backoff: Default::default(),
        recovered: false,
        config_file: Default::default(),
        unsettled: Default::default(),
        health,
        observed,
        notifier: notify::Notifier::from_env(tick),
        published_version: None,
        published_refused: None,
        local_digest: None,
        heartbeat_digest: None,
    };
    daemon.local_digest = std::fs::read(&daemon.config_path)
        .ok()
        .map(|b| config::digest(&b));
    daemon.publish_local(false).await;
    // An edit saved before the watcher started is noticed now: applied at once if it has
    // settled, reloaded like any edit once it has otherwise.
    let reload_due = match daemon.config_view().await {
        reload::ConfigView::Settling { same: false, left } => Some(Instant::now() + left),
        _ => None,
    };
    daemon.recover().await;

    let signals = signals.forward(events);
    let ended = event_loop::run(&mut daemon, inbox, reload_due, &opened).await;
    signals.abort();
    control.abort();
    // The address bound at start (a reload may have changed the key, never the listener).
    let http_socket = http.map(|(task, listen, _)| {
        task.abort();
        listen
    });
    if let Err(err) = ended {
        // The socket path, if anything is there now, belongs to another state directory.
        return Err(DaemonError::StateDir(err));
    }
    if let Some(err) = daemon.fenced.take() {
        // The socket now belongs to the daemon that fenced us off: leave it.
        return Err(DaemonError::Store(err));
    }
    let _ = std::fs::remove_file(daemon.state.socket_path());
    if let Some(listen) = &http_socket {
        fleet_http::remove_socket(listen);
    }
    Ok(())
}
