//! The daemon: takes over a state directory, recovers what a previous daemon left, and runs the
//! EVAL loop until SIGTERM or SIGINT. It is the only process that decides what starts.
//!
//! Stopping the daemon (SIGTERM/SIGINT) stops the EVALs and leaves the shims running: they are
//! in their own sessions and hold their runs' locks, and the next daemon adopts them. The setup
//! ([`run`]: lock the state directory, open the store, take over with a new epoch, number new
//! runs above the run files here, record the boot, start the listeners, recover, then the loop)
//! must never claim or spawn anything itself: nothing may start before recovery has settled
//! what a previous daemon left. Only the loop task touches the daemon's state; everything else
//! (shim watchers, listeners) only sends an event, and every database call of the daemon runs
//! on a blocking thread.
//!
//! # Layout
//!
//! One folder, one file per phase, in the order a run meets them:
//! - this file: [`run`], the setup and the teardown;
//! - `connect`: opening the store at start, waiting (with backoff, logged) for a PostgreSQL
//!   server that cannot be reached yet;
//! - `listener`: the control socket, signals and config edits, turned into events (a health
//!   request is answered there, from the heartbeat alone); `events`: the one channel into the
//!   loop, and its closed set of events;
//! - `event_loop`: when to EVAL (coalescing triggers, the tick, timers, reloads);
//! - `recover`: startup recovery and adoption of the runs a previous daemon left, and settling
//!   again what it could not settle yet;
//! - `reload`: re-reading fleet.toml, and whether the config in force is what the file says;
//!   `config_file`: fleet.toml as the file system shows it (its version, whether an edit has
//!   settled), which the state holds and `reload` decides on;
//! - `hosts`: this daemon as one host of a shared database (heartbeat, the published config,
//!   its return after a `fleet hosts forget`); `identity`: where it runs (machine and state
//!   directory, refused a host name alive elsewhere), the database's clock it follows, its
//!   clean stop;
//! - `eval`: one EVAL, and [`eval_blocking`], its database half; `reap`, its first step;
//!   `heads`, the queue heads it packs and the claims it makes of the picks; `refused`, what it
//!   does when the database refuses a row;
//! - `spawn`: starting a claimed run's shim; `hook_env`: a failure hook's `FLEET_FAILED_*`
//!   variables;
//! - `follow`: following a shim (its report pipe, its run's lock, an orphaned command's process
//!   group), turned into events;
//! - `cancel`: signalling the shims of runs whose cancel was requested;
//! - `prune_step`: now and then, pruning ended runs by the retention keys, off the loop;
//! - `outage`: the database lost while the loop runs; `unreadable`: what every EVAL finds
//!   unreadable again, logged at doubling intervals;
//! - `turn` and `notify`: the loop's record of a completed turn (the heartbeat) and what the
//!   service manager is told (`READY=1`, `WATCHDOG=1`, `STATUS=`, `STOPPING=1`);
//! - `state`: the fields of the daemon's in-memory state, owned by the loop task alone, and
//!   (below it) the types of the fields a phase keeps.
//!
//! # One EVAL
//!
//! The loop runs one EVAL whenever something may have changed: a shim reported (its `running
//! PID` line, or its exit), a nudge arrived on the control socket (`eval`, `reload`), fleet.toml
//! changed (the watcher; reloaded once the edit has been quiet for a moment) or SIGHUP came
//! (both reload the config first), the backstop `tick`, or something timed became due (a
//! delayed retry, [`store::Store::next_not_before`]; a schedule occurrence; the end of a
//! backoff). Triggers that arrive during an EVAL are coalesced into exactly one more. A tick
//! alone runs an EVAL only if something may have changed (the database's change probe, a
//! transition waiting to be written, a wall clock that stepped), and at least once a minute; an
//! idle tick is a turn of the loop all the same.
//!
//! Before the steps, on a shared database, a newer published config is applied (its caps are
//! the ones the claims must count against), and the config in force is compared with the file
//! (`config_view`): the steps that decide on the project's settings (the reap's
//! retries, the firing of schedules) wait while an edit of the file has not settled. An EVAL
//! is, in order:
//!
//! 1. **Reap.** For each shim that exited since the last EVAL, [`crate::settle::settle`] reads
//!    its run's files and decides its fate; [`crate::settle::transition`] turns that into a
//!    [`store::Transition`], with a retry per [`crate::retry::RetryPolicy`] for `failed`,
//!    `timed_out` and `lost`. A shim whose pipe ended while its lock is still held is followed
//!    through the lock; one that died while its command's process group lives on
//!    ([`Fate::Orphaned`](crate::settle::Fate::Orphaned)) has that group killed (only a group
//!    identified by its session: a bare number may have been reused) and is followed until the
//!    group is empty, its run active meanwhile. These transitions, plus those waiting in
//!    `Supervised::pending` (`running` reports, recovery's decisions, anything a database that failed
//!    last time did not take), are written in **one** transaction
//!    ([`store::Store::apply_with_hooks`], with the failure hooks of the config in force). If the
//!    database refuses a row of it (a constraint or a trigger another program added,
//!    [`store::StoreError::is_refused_row`]), they are written one at a time instead: a refused
//!    end is written without its retry, then without its failure hook's run (an end is what a
//!    known exit status licenses; lost, it would hold a seat for good), and an end refused even
//!    so waits to be tried again, its run active and counted, while the EVAL goes on.
//! 2. **Recover / adopt.** Done once, before the first EVAL (`recover`, retried until
//!    it has run to the end; nothing is claimed before): every run the database records as
//!    active on this host is settled with the same [`crate::settle::settle`]. A live shim is
//!    *adopted* (put in the slot pool, counted against every cap, and followed through its
//!    run's lock on a thread of its own); every other fate becomes a transition in `pending`,
//!    written by step 1 of the first EVAL. A run whose files or row cannot be read stays active
//!    and is settled again, with a backoff, until it can be. Runs with files in `runs/` that the
//!    database does not hold as active but whose lock is held are logged, never acted on (`fleet
//!    check` reports them) — but one: on a shared database, a run the database holds as ended
//!    `lost` by `fleet hosts forget` ([`store::ended_by_forget`]), on this host, under the very
//!    claim the live shim holds, was taken while this host's daemon was away; its command is
//!    stopped as a cancel stops one, and its slot kept until the shim is gone, so that this host
//!    starts nothing beside it. That look probes the lock of every run with files here: on
//!    SQLite (no forget there) it only warns and runs on a thread of its own, off the way to the
//!    first claim; on a shared database it runs before it. A run recorded `running` whose files
//!    no longer hold its `running` record (removed or overwritten by hand) while a process group
//!    with the number the database recorded (`runs.pid`) still has processes is orphaned by that
//!    number alone: left active, never signalled, until the group is gone; the store then turns
//!    the requeue its "never started" asks for into `lost` (a `running` run did start). The reap
//!    applies the same rule, with the pid the shim reported.
//! 3. **Fire schedules** ([`crate::schedule::fire_due`]). First, delays written by a clock that
//!    has since stepped back are counted again from now ([`crate::clock`]). Then, for each
//!    project with a `schedule`, the persisted cursor (the last occurrence handled, fired or
//!    skipped; table `schedules`) and [`config::schedule::timetable::due`] decide what is due:
//!    the latest occurrence since the cursor fires if it is within `starting_deadline`, older
//!    ones are skipped. [`store::Store::fire_schedule`] inserts the occurrence's run — under the
//!    unique key (project, occurrence) — in the same transaction that advances the cursor, so
//!    "handled" means "a row exists". Overlap: `forbid` records a skip once the project's queued
//!    and active runs fill its `max_parallel` seats, `queue` queues behind them, `replace` asks
//!    the oldest active run to stop once the active runs fill them, and queues the new one. A skip is a `cancelled` run whose note starts with "skipped:". A project whose
//!    next occurrence is in the future costs one row read. The earliest next occurrence sets the
//!    loop's wake-up timer, so a schedule does not wait for the tick. A cursor later than now by
//!    more than the clock tolerance means the clock stepped back: the schedule restarts from now,
//!    logged and recorded for `fleet status` ([`config::clock`]).
//! 4. **List the unknown.** Queued runs of projects the config does not know are *listed*
//!    ([`EvalOutcome::unknown_queued`]; every queued project is looked at after a config change
//!    and at startup, the queue heads otherwise), never ended in the EVAL itself: after the
//!    spawns, `end_removed` asks `config_view` whether the file, read after the
//!    listing, still lacks their projects, and only then ends those very runs `cancelled`
//!    ("project removed", [`store::Store::cancel_queued_runs`]). A run queued by a command that
//!    read a newer file than the daemon's waits for the daemon to read it.
//! 5. **Pack.** The DB running set ([`store::Store::active_rows`], which counts a row another
//!    program left unreadable by its project, namespace and host) is merged with the slot pool
//!    ([`packer::merge`]: every run either side holds, once; a run the pool holds whose end was
//!    just written is dropped first). The queue heads ([`store::Store::queue_heads`]: the best
//!    queued run of each project whose `not_before` has passed), less those of paused projects
//!    and namespaces, plus the next runs of a project with more than one free seat
//!    ([`store::Store::queue_of`]), less the runs held back after a refused claim (with the runs
//!    behind them in their place), become [`packer::Candidate`]s in their project's *current*
//!    namespace. [`config::Config::caps`] gives the caps, with this host's rules (its
//!    `[hosts.NAME] max_concurrency`, the projects placed only on other hosts) for the daemon's
//!    host name, fixed for its life; [`packer::packer_for`] picks the packer, whose `pack`
//!    returns the runs to start.
//! 6. **Claim.** [`store::Store::claim_noting_refusals`] moves each pick `queued → starting` with
//!    one guarded `UPDATE`, all in one transaction, checked against the daemon's epoch (and, on a
//!    shared database, the published config version the caps came from), and **committed before
//!    it returns**. Each claim appends an event carrying the occupancy and caps at that instant.
//!    A claim the database refuses leaves its run queued, held back for a growing wait
//!    ([`ClaimBackoff`]), and the next EVAL follows at once so that the runs behind it take its
//!    place. Nothing is claimed while a failed spawn holds claims back, nor while an active row
//!    whose project or namespace cannot even be read could count against any cap.
//! 7. **Spawn.** `spawn` starts the shim of each claimed run (in its own session, with
//!    the run's environment; a failure hook's run gets the failed run's `FLEET_FAILED_*`
//!    variables): it asks the fork server for it, or execs `fleet shim` when there is none. It
//!    records a slot in the pool and follows the shim's report pipe, which forwards the `running
//!    PID` line and the pipe's end-of-file (the shim is gone) to the loop as events.
//! 8. **Cancel.** For active runs whose cancel was requested (`runs.cancel_requested`), the shim
//!    is sent SIGTERM once, after checking it is still the same process (pid plus start time).
//!    The status changes only when the shim reports the command gone.
//!
//! Steps 1 and 3 to 6 run in one `spawn_blocking` closure: the reading of the run files, then
//! [`eval_blocking`], which does all the database work. Steps 7 and 8 are non-blocking and run
//! on the loop task; the loop's only other blocking calls are process starts (a round trip to
//! the fork server, bounded in time, or a fork and exec of `fleet shim`).
//!
//! # When the database says no
//!
//! If a database call fails (typically a busy database: another connection held the write lock
//! past the busy timeout), the EVAL stops there: nothing after the failure happens, the
//! transitions not yet written stay in `pending` (and their slots in the pool, hence in the
//! running set), and the next EVAL waits for a backoff. No claim is ever made while reaped
//! transitions are still unwritten, but for those the database refuses alone (step 1): their
//! runs stay active in the database, so they count against every cap. A write refused as fenced
//! (another daemon of this host took over) stops the loop for good; on a shared database, a host
//! an operator forgot rejoins instead, under a new epoch.
//!
//! | what failed | what waits | first wait, doubling up to |
//! | --- | --- | --- |
//! | an EVAL (busy database, or any other error) | the whole next EVAL | 100 ms, 5 s |
//! | an EVAL or recovery, the database unreachable | the next EVAL, as an outage (one log line, health says stuck) | 1 s, 30 s |
//! | startup recovery | every EVAL (nothing is claimed before recovery) | 200 ms, 5 s |
//! | settling a run recovery could not settle | that run alone | 200 ms, 5 s |
//! | a transition the database refuses even alone | that transition alone | 1 s, 60 s |
//! | a claim the database refuses | that run's claim alone | 1 s, 60 s |
//! | firing one project's schedule, refused by the database | that project's occurrence alone ([`crate::schedule::FireBackoff`], kept across EVALs, forgotten when its timetable is edited) | 1 s, 60 s |
//! | a shim spawn that fails for lack of a resource (EMFILE) | every claim | 200 ms, 10 s |
//!
//! Only the first two stop an EVAL; the others hold back one run, one project or the claims,
//! while the rest of the EVAL goes on.

mod config_file;
mod connect;
mod eval;
mod eval_blocking;
mod event_loop;
mod events;
mod follow;
mod heads;
mod hook_env;
mod hosts;
mod identity;
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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use config::Config;
use fleet_http::Observed;
use health::Health;
use store::{now_ms, Store, StoreError};
use tokio::time::Instant;

pub use eval_blocking::{claim_packed, eval_blocking, eval_until_claim, EvalGates, EvalOutcome};
pub use state::refused::ClaimBackoff;

use crate::caps::caps_json;
use crate::shim::forkserver::ForkServer;
use crate::slots::SlotPool;
use crate::statedir::{StateDir, StateDirError};
use hosts::publish_local;
use recover::recover;
use reload::config_view;
use state::{Daemon, Holds, InForce, Membership, RecoveryState, Reporting, Setup, Supervised};

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
    // On a shared database: the database's clock followed before anything is timed, and this
    // daemon's place, which the take-over records (and by which a live host elsewhere refuses it).
    let place = {
        let (store, here) = (store.clone(), state.clone());
        tokio::task::spawn_blocking(move || {
            identity::follow_database_clock(&store);
            identity::place(&here)
        })
        .await
        .expect("reading the clock and place panicked")
        .map_err(|source| DaemonError::Io {
            what: format!(
                "telling where this daemon runs (the machine's name, the state directory {})",
                state.root().display()
            ),
            source,
        })?
    };
    let epoch = {
        let store = store.clone();
        let caps = caps_json(&config);
        let path = options.config_path.display().to_string();
        let host = config.host.clone();
        let root = state.root().to_path_buf();
        // Another program may hold the write lock as we start: wait it out, never give up.
        tokio::task::spawn_blocking(move || {
            reserve_epochs(&store, &root)?;
            loop {
                let pid = std::process::id() as i32;
                match store.take_over_from(&host, place.as_ref(), pid, &path, &caps, now_ms()) {
                    Err(e) if e.is_busy() => {
                        tracing::warn!(error = %e, "the database is busy; retrying the takeover");
                        std::thread::sleep(Duration::from_millis(500));
                    }
                    other => break other,
                }
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
    let published_slots = Arc::new(crate::slots::PublishedSlots::default());
    let control = listener::control_socket(
        &socket,
        events.clone(),
        health.clone(),
        published_slots.clone(),
    )
    .map_err(|source| DaemonError::Io {
        what: format!("binding the control socket {}", socket.display()),
        source,
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
        setup: Setup {
            host_flag,
            config_path: options.config_path,
            shim_program: options.shim_program,
            fork_server: options.fork_server,
            shim_log: options.shim_log,
            state,
            store,
            boots,
            events: events.clone(),
        },
        config: InForce {
            current: config,
            file: Default::default(),
            sweep_removed: true,
            local_digest: None,
        },
        runs: Supervised {
            slots: SlotPool::new(),
            pending: Vec::new(),
            refused: Default::default(),
            exited: Vec::new(),
            unkept_tails: Vec::new(),
        },
        recovery: RecoveryState::default(),
        holds: Holds::new(),
        host: Membership {
            epoch,
            fenced: None,
            http_addr,
            published_version: None,
            published_refused: None,
            heartbeat_digest: None,
        },
        report: Reporting {
            published_slots,
            health,
            observed,
            notifier: notify::Notifier::from_env(tick),
        },
    };
    let local = std::fs::read(&daemon.setup.config_path).ok();
    daemon.config.local_digest = local.as_deref().map(config::digest);
    let text = local.and_then(|bytes| String::from_utf8(bytes).ok());
    publish_local(&mut daemon, false, text).await;
    // An edit saved before the watcher started is noticed now: applied at once if it has
    // settled, reloaded like any edit once it has otherwise.
    let reload_due = match config_view(&mut daemon).await {
        reload::ConfigView::Settling { same: false, left } => Some(Instant::now() + left),
        _ => None,
    };
    recover(&mut daemon).await;

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
    if let Some(err) = daemon.host.fenced.take() {
        // The socket now belongs to the daemon that fenced us off: leave it.
        return Err(DaemonError::Store(err));
    }
    let _ = std::fs::remove_file(daemon.setup.state.socket_path());
    {
        let (store, epoch) = (daemon.setup.store.clone(), daemon.host.epoch);
        let _ = tokio::task::spawn_blocking(move || identity::record_stop(&store, epoch)).await;
    }
    if let Some(listen) = &http_socket {
        fleet_http::remove_socket(listen);
    }
    Ok(())
}

/// Moves the database's epoch counter above every epoch the state directory at `root` has
/// recorded a daemon under ([`crate::boot::highest_epoch`]), before the takeover takes the
/// next one: a database restored from an older backup would otherwise hand this daemon the
/// epoch of a daemon that ran after the backup. A `boot` file that cannot be read is said, and
/// the database's own counter kept (the recovery that reads it says what that costs).
///
/// Errors: the database's, but busy, which is waited out.
fn reserve_epochs(store: &Store, root: &Path) -> Result<(), StoreError> {
    let highest = match crate::boot::highest_epoch(root) {
        Ok(highest) => highest,
        Err(e) => {
            tracing::warn!(error = %e, path = %root.join(crate::boot::BOOT_FILE).display(), "cannot read the epochs of earlier daemons; the database's own counter is kept");
            None
        }
    };
    let Some(highest) = highest else {
        return Ok(());
    };
    loop {
        match store.reserve_epochs(highest) {
            Err(e) if e.is_busy() => {
                tracing::warn!(error = %e, "the database is busy; retrying the epoch check");
                std::thread::sleep(Duration::from_millis(500));
            }
            Ok(true) => {
                tracing::warn!(epoch = highest, "a daemon here already ran under epoch {highest}, which the database would have handed out again (a database restored from an older backup?): the next epoch is above it");
                return Ok(());
            }
            Ok(false) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}
