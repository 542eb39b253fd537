//! [`StoreError`]: everything that can go wrong in the store, for every caller.
//!
//! The variants a caller acts on (an unknown run, a refused transition, a stale epoch, a
//! corrupt row) carry the run id or key they concern and say nothing about SQL. The database's
//! own failures are one backend-neutral variant, [`StoreError::Backend`], that keeps the
//! driver's error as its source: which of them may be retried, and which are a row's own
//! refusal, is decided by the backend that produced them, when it converts its driver's error
//! into this one, and read here ([`StoreError::is_busy`], [`StoreError::is_refused_row`]),
//! never by string matching in callers. This module never names a driver nor a backend: each
//! backend has its conversions beside its code, and this enum stays as it is.

use std::path::PathBuf;

use crate::{RunId, RunStatus};

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file could not be opened or its schema brought up to date.
    #[error("database {}: {source}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// What SQLite or the pool said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The database failed: a statement, or getting a connection. Built by the backend, which
    /// decides whether the failure is the retryable kind (`busy`, see [`StoreError::is_busy`]).
    #[error("{context}: {source}")]
    Backend {
        /// What failed, as the message shows it: `database` for a statement, `database
        /// connection pool` when no connection could be had.
        context: &'static str,
        /// True when another connection held the write lock past the busy timeout: the
        /// operation changed nothing and may be retried later.
        busy: bool,
        /// True when the database refused what the statement wrote (a constraint, an error a
        /// trigger raised), or a row read holds a value this version cannot read, rather than
        /// failing as a whole: see [`StoreError::is_refused_row`]. Never true with `busy`.
        refused: bool,
        /// What the driver said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The connection to the database was lost or refused while in use: the server went away
    /// (stopped, restarted, crashed, the network dropped) or no new connection could be opened.
    /// Built by a backend that talks to a server (PostgreSQL), never by SQLite. What the failed
    /// operation did is unknown when the loss came with its commit: callers retry with backoff,
    /// and read back what they need to know. See [`StoreError::is_unreachable`].
    #[error("{context}: {source}")]
    Unreachable {
        /// What failed, as the message shows it: `database` for a statement, `database
        /// connection pool` when no connection could be opened.
        context: &'static str,
        /// What the driver or the pool said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The PostgreSQL database could not be reached (or it was lost, or busy, while its schema
    /// was being brought up to date): tried again later.
    #[error("database {target}: {source}")]
    Connect {
        /// Which database, as the connection string names it (host, port, database, user;
        /// never the password).
        target: String,
        /// What the driver or the pool said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The PostgreSQL database was reached, but refused to bring its schema up to date (the
    /// role may not create or alter fleet's tables, say): trying again changes nothing until
    /// an operator does something. Not [`StoreError::is_unreachable`].
    #[error("database {target}: its schema cannot be brought up to date: {source}")]
    Migrate {
        /// Which database, as [`StoreError::Connect`] names it.
        target: String,
        /// What the server said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The database's schema is newer than this fleet knows (a newer fleet migrated it): this
    /// version refuses to write to it rather than guess.
    #[error("the database schema is at version {found}, newer than this fleet knows ({known}): upgrade fleet")]
    SchemaTooNew {
        /// The version found in the database.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// The database's schema is older than this fleet's, or missing (`found` 0), and the store
    /// was opened for reading only, which never migrates: a daemon, or a command that writes,
    /// run by a user (on PostgreSQL, a role) that may create and alter fleet's tables brings
    /// it up to date.
    #[error("{}", schema_behind_message(*found, *known))]
    SchemaBehind {
        /// The version found in the database (0: no fleet schema).
        found: i64,
        /// The version this build reads.
        known: i64,
    },
    /// The operation is not implemented on this backend yet; nothing was read or written.
    #[error("{operation} is not supported on the {backend} backend yet")]
    Unsupported {
        /// The operation, as the `Store` method is named.
        operation: &'static str,
        /// The backend (`PostgreSQL`).
        backend: &'static str,
    },
    /// The id names no run.
    #[error("no run with id {0}")]
    UnknownRun(RunId),
    /// A write to a run's row changed no row, with no error: something on the database (a
    /// trigger another program added, with `RAISE(IGNORE)` or `RETURN NULL`) dropped it
    /// silently. Counted as a refusal ([`StoreError::is_refused_row`]): taken for written, the
    /// run would keep a status that no longer describes it, and hold its seat for good.
    #[error("run {run}: the database dropped the write of its status {to} without an error (a trigger that ignores it?)")]
    RowIgnored {
        /// The run.
        run: RunId,
        /// The status the write was for.
        to: RunStatus,
    },
    /// An insert of a run that the database dropped with no error and no row: a trigger
    /// another program added (`RAISE(IGNORE)`, `RETURN NULL`). Counted as a refusal
    /// ([`StoreError::is_refused_row`]), as an insert refused with an error is.
    #[error("the database dropped the new run of project {project} ({trigger}) without an error (a trigger that ignores it?)")]
    InsertIgnored {
        /// The project of the run that was to be inserted.
        project: String,
        /// Its trigger (`manual`, `schedule`, `retry`, …).
        trigger: String,
    },
    /// A write would move a run along a transition the state machine does not allow.
    #[error("run {run}: {from} -> {to} is not an allowed transition")]
    IllegalTransition {
        /// The run.
        run: RunId,
        /// Its status in the database.
        from: RunStatus,
        /// The status asked for.
        to: RunStatus,
    },
    /// The caller's epoch is not in force any more: another daemon of the same host took over
    /// (a newer epoch), an operator forgot the host (`forgotten`), or the database was replaced
    /// by an older copy of itself (`current` older than `ours`).
    #[error("{}", fenced_message(*ours, *current, *forgotten))]
    Fenced {
        /// The epoch the caller holds.
        ours: i64,
        /// The newest epoch in the database (the global counter).
        current: i64,
        /// True when the host this epoch belonged to was forgotten by an operator: its runs
        /// were taken from it, and its daemon may rejoin under a new epoch. False when another
        /// daemon of the same host took over: the caller must stop.
        forgotten: bool,
    },
    /// The claim carried caps of config version `ours`, but version `published` is in force:
    /// nothing was claimed. The caller applies the published config and packs again.
    #[error("the claim was packed with config version {ours}, but version {published} is published: nothing claimed")]
    StaleConfig {
        /// The version the claim's caps came from.
        ours: i64,
        /// The version in the database (0: nothing published).
        published: i64,
    },
    /// No host of that name has ever taken over this database.
    #[error("no host named {0:?} is known to the database")]
    UnknownHost(String),
    /// [`crate::Store::forget_host`] of a host already forgotten (and not back since): nothing
    /// was written, so that its epoch and who forgot it stay as the first forget left them.
    #[error("host {host} was already forgotten at {} by {by}", crate::rfc3339(*at))]
    AlreadyForgotten {
        /// The host.
        host: String,
        /// When it was forgotten (UTC ms).
        at: crate::Millis,
        /// Who forgot it.
        by: String,
    },
    /// [`crate::Store::take_over_from`] under a host name whose daemon, in another place
    /// (machine or state directory), is alive: its heartbeat is younger than
    /// [`crate::SILENCE_MS`] by the database's clock and it has not stopped. Nothing was
    /// written: that daemon goes on untouched.
    #[error("{}", host_alive_message(host, machine, *pid, *age_ms, *same_machine))]
    HostAlive {
        /// The host name.
        host: String,
        /// The machine its live daemon runs on.
        machine: String,
        /// That daemon's pid (on that machine).
        pid: i32,
        /// Its heartbeat's age, by the database's clock (ms).
        age_ms: crate::Millis,
        /// That machine is this one (the other daemon runs from another state directory).
        same_machine: bool,
    },
    /// An active row holds a value this version cannot read (written by another program):
    /// what [`crate::UnreadableRun::error`] says, for a read that needs every row.
    #[error("{what}")]
    UnreadableRow {
        /// The run.
        run: RunId,
        /// What could not be read, in words.
        what: String,
    },
    /// A row holds a value this version does not understand (written by another program).
    #[error("run {run}: column {column} holds {value:?}, which fleet does not understand")]
    Corrupt {
        /// The run.
        run: RunId,
        /// The column.
        column: &'static str,
        /// The value found.
        value: String,
    },
}

impl StoreError {
    /// True when the database was busy (for SQLite, `SQLITE_BUSY`/`SQLITE_LOCKED`): another
    /// connection held the write lock past the busy timeout. The operation changed nothing and
    /// may be retried later.
    pub fn is_busy(&self) -> bool {
        matches!(self, StoreError::Backend { busy: true, .. })
    }

    /// True when the database refused what a statement wrote — a constraint, or an error raised
    /// by a trigger (SQLite's `SQLITE_CONSTRAINT`, which a trigger's `RAISE(ABORT, …)` gives;
    /// PostgreSQL's class 23, integrity constraint violation, or `P0001`, a trigger's `RAISE
    /// EXCEPTION`) — or when the row read back holds a value this version cannot read
    /// ([`StoreError::Corrupt`], [`StoreError::UnreadableRow`], a number out of range), rather
    /// than failing as a whole (locked, full, a damaged file, read-only, unreachable). The same
    /// statement with other rows may well succeed: a refusal is the rows' own, and a caller may
    /// go on with other work. For [`StoreError::Backend`] the backend decided it, as `refused`.
    pub fn is_refused_row(&self) -> bool {
        // A row holding a value this version cannot read is that row's own problem too: the
        // same write to another row goes through.
        matches!(
            self,
            StoreError::RowIgnored { .. }
                | StoreError::InsertIgnored { .. }
                | StoreError::Corrupt { .. }
                | StoreError::UnreadableRow { .. }
                | StoreError::Backend { refused: true, .. }
        )
    }

    /// True when the database server could not be reached: a connection lost or refused while
    /// running ([`StoreError::Unreachable`]) or at open ([`StoreError::Connect`]). Nothing can be
    /// read or written until it is back; unlike a busy database, the wait may be long, so
    /// callers back off further and say so once, not at every try. Never true for SQLite.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable { .. } | StoreError::Connect { .. }
        )
    }

    /// True when the database could not be opened because the system refused this user access
    /// to it, or to a folder on its way (permission denied): the path is in the error.
    pub fn is_permission_denied(&self) -> bool {
        match self {
            StoreError::Open { source, .. } => source
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied),
            _ => false,
        }
    }
}

/// What [`StoreError::HostAlive`] says: who holds the name, where, and the three ways on.
fn host_alive_message(
    host: &str,
    machine: &str,
    pid: i32,
    age_ms: crate::Millis,
    same_machine: bool,
) -> String {
    let there = if same_machine {
        "this machine, from another state directory"
    } else {
        "another machine"
    };
    format!(
        "host {host} is alive on machine {machine} (its daemon, pid {pid}, beat {:.1}s ago, on \
         {there}): not taking it over, as its runs' files are there. Start this daemon under \
         another name (fleet daemon --host NAME), or stop that daemon first; if that machine is \
         gone, wait until `fleet hosts` shows {host} silent and run `fleet hosts forget {host}`",
        age_ms as f64 / 1000.0
    )
}

/// What [`StoreError::Fenced`] says: an epoch only grows, so an older one in the database means
/// the database itself was replaced.
fn fenced_message(ours: i64, current: i64, forgotten: bool) -> String {
    if forgotten {
        format!(
            "epoch {ours} was forgotten by an operator (fleet hosts forget): this host's runs were taken from it"
        )
    } else if current < ours {
        format!(
            "the database holds epoch {current}, older than this daemon's epoch {ours}: it was replaced by an older copy (a restored backup?)"
        )
    } else {
        format!("epoch {ours} is stale: this host's daemon was taken over (epoch {current})")
    }
}

/// What [`StoreError::SchemaBehind`] says: what is missing, and what brings it up to date.
fn schema_behind_message(found: i64, known: i64) -> String {
    if found == 0 {
        format!(
            "the database holds no fleet schema (version {known}) that this user may see: start a daemon, or a command that writes, as a user (on PostgreSQL, a role) that may create it; a command that only reads creates nothing"
        )
    } else {
        format!(
            "the database schema is at version {found}, older than this fleet's ({known}): start a daemon, or a command that writes, as a user (on PostgreSQL, a role) that may migrate it; a command that only reads leaves it as it is"
        )
    }
}

/// The store's result type.
pub(crate) type Result<T, E = StoreError> = std::result::Result<T, E>;
