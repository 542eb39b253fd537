//! The daemon's in-memory state ([`Daemon`]), owned by the loop task alone.
//!
//! One task owns it and nothing else mutates it, so there are no locks around the slot pool:
//! shim watchers and the control socket only send [`Event`](super::events::Event)s.
//!
//! It is held in parts, one per concern ([`Setup`], [`InForce`], [`Supervised`],
//! [`RecoveryState`], [`Holds`], [`Membership`], [`Reporting`]). The phases are functions in
//! their own modules, never methods of these types: a phase that needs only some parts takes
//! only those (`turn` takes the reporting, the slot pool and the store; `note_unreadable` one
//! counter), so that its signature is the list of what it reads and changes. The phases that
//! orchestrate the others (the EVAL, recovery, reload, the heartbeat) take the whole
//! [`Daemon`]. This module only declares the parts (and how a part starts out), and must
//! never grow behaviour of its own.
//!
//! The types of the fields a phase keeps are in files of their own below this one, which never
//! import [`Daemon`], so that a phase's file and this one never import each other:
//! - `outage`: an outage of the database in progress (`daemon/outage.rs` handles it);
//! - `refused`: what the database refused, waiting to be tried again (`daemon/refused.rs`);
//! - `repeats`: how many looks in a row found each run unreadable (`daemon/unreadable.rs`);
//! - `unsettled`: the active runs recovery could not settle yet (`daemon/recover.rs`).

pub(super) mod outage;
pub(super) mod refused;
pub(super) mod repeats;
pub(super) mod unsettled;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use config::Config;
use fleet_http::Observed;
use health::Health;
use store::{RunId, Store, StoreError, Transition};
use tokio::time::Instant;

use super::config_file::ConfigFile;
use super::events::Events;
use crate::backoff::Backoff;
use crate::shim::forkserver::ForkServer;
use crate::slots::SlotPool;
use crate::statedir::StateDir;

/// All the state of one daemon process, in parts grouped by what they are for: a phase takes
/// the parts it reads and changes, and the rest stays out of its reach.
pub(super) struct Daemon {
    /// What the daemon was started with, fixed for its life: the handles every phase acts
    /// through (the store, the state directory, the way shims are started, the loop's inbox).
    pub(super) setup: Setup,
    /// The config in force, and what the daemon knows of the file it came from: nothing is
    /// decided on a config older than the file.
    pub(super) config: InForce,
    /// The runs this process supervises, and what is still to be written about them: the slot
    /// pool and its seats must match the database's running set at every claim.
    pub(super) runs: Supervised,
    /// What recovery of the runs a previous daemon (or an outage) left still owes: nothing is
    /// claimed before it has run to the end.
    pub(super) recovery: RecoveryState,
    /// What waits, and until when: the back-offs after failures, the holds on claims, and the
    /// next instant something timed is due.
    pub(super) holds: Holds,
    /// This daemon as one host of the database: its epoch (every write is fenced with it) and,
    /// on a shared database, the published config and what its heartbeat last reported.
    pub(super) host: Membership,
    /// What the daemon shows of itself: health, the HTTP listener's counters, the control
    /// socket's slots, the service manager.
    pub(super) report: Reporting,
}

/// What the daemon was started with, fixed for its life.
pub(super) struct Setup {
    /// The daemon's host name ([`Config::host`]) came from `fleet daemon --host`, not from the
    /// file: a reload then never finds it changed.
    pub(super) host_flag: bool,
    /// Where the config is read from, at reload.
    pub(super) config_path: PathBuf,
    /// The program run as `PROGRAM shim ARGS…` when a shim is exec'd.
    pub(super) shim_program: PathBuf,
    /// Where shims are forked; `None` once it failed (shims are exec'd from then on).
    pub(super) fork_server: Option<Arc<ForkServer>>,
    /// The shape of the shims' own log lines (the daemon's log's, chosen at start).
    pub(super) shim_log: crate::shim::log::ShimLog,
    /// The state directory, held under the daemon lock.
    pub(super) state: StateDir,
    /// The database.
    pub(super) store: Store,
    /// Which claims a restart of the machine may have cut short (recorded before the first
    /// claim): what recovery needs to read a missing `started` record rightly.
    pub(super) boots: crate::boot::Boots,
    /// For shim watchers and waiters, and for a nudge to itself.
    pub(super) events: Events,
}

/// The config in force, and what the daemon knows of its file.
pub(super) struct InForce {
    /// The config in force (the last good one; a refused reload leaves it).
    pub(super) current: Arc<Config>,
    /// What the daemon knows of the config file (which version the config came from), so that
    /// nothing is ended on the strength of a config older than the file.
    pub(super) file: ConfigFile,
    /// The next EVAL looks for queued runs of every project missing from the config (set at
    /// startup and after each config change).
    pub(super) sweep_removed: bool,
    /// The digest of the local fleet.toml as last taken (shared database): a read of the file
    /// that finds the same text is no edit, and leaves the published config in force.
    pub(super) local_digest: Option<String>,
}

/// The runs this process supervises, and what is still to be written about them.
pub(super) struct Supervised {
    /// The slot pool: the runs this process supervises.
    pub(super) slots: SlotPool,
    /// Transitions decided but not yet in the database (it was busy). They are written before
    /// any new claim, and their slots stay in the pool — and so in the running set — until then.
    pub(super) pending: Vec<Transition>,
    /// Transitions the database refused even written alone (a trigger or constraint another
    /// program added), by run: kept out of `pending`, so that each is tried again after a wait
    /// of its own (see [`refused::Refused`]) rather than at every EVAL. Their slots stay in
    /// the pool, and their runs active in the database.
    pub(super) refused: BTreeMap<RunId, refused::Refused>,
    /// Shims that exited since the last EVAL: (run, token).
    pub(super) exited: Vec<(RunId, u64)>,
    /// Ended runs whose log tail could not be kept in a shared database yet (it was away):
    /// tried again, first, at the next EVAL that keeps tails.
    pub(super) unkept_tails: Vec<RunId>,
}

/// What recovery still owes.
#[derive(Default)]
pub(super) struct RecoveryState {
    /// Startup recovery has run to the end (it is retried, with backoff, until it has).
    pub(super) done: bool,
    /// Active runs recovery could not settle yet (their files could not be read or written).
    pub(super) unsettled: unsettled::Unsettled,
    /// An outage ended: the runs the database holds as active under this epoch that nothing
    /// here supervises are settled again after the next EVAL (`reconcile`).
    pub(super) reconcile_due: bool,
}

/// What waits, and until when.
pub(super) struct Holds {
    /// After a failed EVAL or recovery (busy or unreachable database): no EVAL before it is
    /// due; the wait doubles. One back-off for the three kinds of failure (an EVAL, recovery,
    /// the database unreachable), each setting its own first wait and cap before it counts: the
    /// next failure doubles the wait the last one left, whichever kind it was, and a success
    /// resets it.
    pub(super) backoff: Backoff<Instant>,
    /// The database cannot be reached (since a failed operation of the loop): see
    /// `daemon/outage.rs`. `None` while it can.
    pub(super) outage: Option<outage::Outage>,
    /// After a shim could not be started for lack of a resource (EMFILE, ENOMEM…): no run is
    /// claimed before it is due; the wait doubles while spawns keep failing, and is reset once
    /// a shim starts.
    pub(super) spawn_hold: Backoff<Instant>,
    /// The earliest instant a delayed (retry) run or a schedule occurrence becomes due.
    pub(super) next_due: Option<Instant>,
    /// Scheduled projects whose own schedule step failed, and when each is tried again: one
    /// project's failure must not stop the EVAL for the others.
    pub(super) fire_backoff: crate::schedule::FireBackoff,
    /// Runs whose claim the database refused, held out of the packing for a growing wait
    /// (`daemon/refused.rs`).
    pub(super) claim_backoff: refused::ClaimBackoff,
    /// Runs whose files the reap failed to read, with how many times in a row: their errors
    /// are logged at doubling intervals, not at every EVAL.
    pub(super) reap_failures: repeats::Repeats,
    /// Active rows another program left unreadable, with what could not be read and how many
    /// EVALs in a row found them so: logged at doubling intervals, not at every EVAL.
    pub(super) unreadable_rows: repeats::Repeats,
}

/// This daemon as one host of the database.
pub(super) struct Membership {
    /// This daemon's epoch: every write is fenced with it.
    pub(super) epoch: i64,
    /// Set when the store refused a write because a newer epoch took over: the loop stops.
    pub(super) fenced: Option<StoreError>,
    /// Where other hosts reach this daemon's HTTP listener, as bound at start
    /// ([`fleet_http::Bound::reachable_at`]): published with the heartbeat for remote
    /// `fleet logs`. `None` without a TCP listener.
    pub(super) http_addr: Option<String>,
    /// The published config version this host's local file was published as (shared
    /// database only), reported with its heartbeat.
    pub(super) published_version: Option<i64>,
    /// The published version found unusable here, once logged (not again at every EVAL).
    pub(super) published_refused: Option<i64>,
    /// The local fleet.toml's digest as last reported by the heartbeat: its bytes' digest and
    /// its [`config::published_digest`], taken again only when the bytes change (that
    /// one parses the file, and the heartbeat comes every 2 s).
    pub(super) heartbeat_digest: Option<(String, String)>,
}

/// What the daemon shows of itself.
pub(super) struct Reporting {
    /// The runs of `slots` at the last turn, for the control socket's `slots` answer.
    pub(super) published_slots: Arc<crate::slots::PublishedSlots>,
    /// The loop's heartbeat, read by whatever reports health.
    pub(super) health: Arc<Health>,
    /// What the HTTP listener shows: the loop feeds its counters and the config in force.
    pub(super) observed: Arc<Observed>,
    /// What the service manager (systemd) was told, when there is one.
    pub(super) notifier: super::notify::Notifier,
}

impl Holds {
    /// Nothing held, nothing failed: a daemon's holds at its start.
    pub(super) fn new() -> Holds {
        Holds {
            backoff: Backoff::new(super::eval::EVAL_RETRY_FIRST, super::eval::EVAL_RETRY_MAX),
            outage: None,
            spawn_hold: Backoff::new(super::spawn::SPAWN_HOLD_MIN, super::spawn::SPAWN_HOLD_MAX),
            next_due: None,
            fire_backoff: Default::default(),
            claim_backoff: Default::default(),
            reap_failures: Default::default(),
            unreadable_rows: Default::default(),
        }
    }
}
