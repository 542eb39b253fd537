//! fleet's store: the database schema, its migrations, and every SQL statement of the project.
//!
//! Nothing outside this crate speaks SQL. The API speaks in operations — enqueue, claim,
//! apply transitions, queue heads, take over — so that a second database can offer the same
//! operations without the supervisor changing.
//!
//! # Layout
//!
//! - `model`: the row types ([`Run`], [`NewRun`], [`Transition`], [`Event`], …), [`Millis`].
//! - `activity`: [`ProjectActivity`], each project's runs summed up for `fleet projects`.
//! - `hosts`: [`HostRow`], [`HostInfo`], [`Forgotten`], [`Published`], [`LogTail`], [`Place`]:
//!   many hosts on one database, when a host counts as alive ([`SILENCE_MS`]), and where its
//!   daemon runs.
//! - `paused`: [`HoldKind`], [`Pause`], [`Pauses`]: what `fleet pause` holds.
//! - `error`: [`StoreError`], and which failures may be retried ([`StoreError::is_busy`]), are a
//!   row's own refusal ([`StoreError::is_refused_row`]) or a database out of reach
//!   ([`StoreError::is_unreachable`]); decided by the backend that converts its driver's error,
//!   never by matching strings.
//! - [`status`]: the one run state machine ([`RunStatus`], [`TRANSITIONS`]).
//! - `operator`: the bulk cancel's selection and result ([`CancelSelection`], [`BulkCancelled`]).
//! - `prune`: what pruning asks of the store ([`PrunePolicy`], [`Keep`], [`PruneCandidate`]).
//! - `summary`: monitoring totals ([`EndedTotal`], [`QueueSummary`]).
//! - [`db_clock`]: the database's clock, which a process on a shared database follows, so
//!   that [`now_ms`] is the same instant on every host whatever its own clock says.
//! - [`test_clock`]: the wall clock shifted by an offset, for the end-to-end tests (feature
//!   `failpoints` only).
//! - `store`: [`Store`], the one handle callers use, and [`ChangeProbe`]: fronts over a backend.
//!   `store_hosts`: the same front for the operations of many hosts.
//! - `decide`: the backend-neutral decisions (a transition's plan, a schedule step, prune
//!   eligibility, claim caps, a cancel, the run columns' meaning), written once and executed by
//!   each backend with its own SQL; never names SQL nor a driver.
//! - `sqlite`: the SQLite backend, one file per concern; the only code that touches `rusqlite`.
//! - `postgres`: the PostgreSQL backend, the same files; the only code that touches `postgres`.
//!   How it keeps each guarantee under concurrent writers, and where it differs from SQLite, is
//!   its module doc.
//!
//! Everything above `store` is backend-neutral plain data and never names SQL; the public items
//! are re-exported at the crate root. Every `Store` method blocks (each backend keeps an r2d2
//! pool): async callers run it on a blocking thread.
//!
//! # Where a second backend plugs in
//!
//! [`Store`] holds a private `enum Backend { Sqlite(..), Postgres(..) }` and each of its
//! methods is one `match` on it; `postgres/` beside `sqlite/` offers the same methods, and
//! [`Store::open_postgres`] beside [`Store::open`] chooses it. Callers call the same `Store`
//! methods whichever they opened, and cannot tell the backends apart but by the constructor
//! (the supervisor calls one or the other in one place, from the config's `database` key). An enum rather than a trait object because the set of
//! backends is closed and known here: the `match` compiles to a direct call (no vtable, no
//! allocation, nothing to clone but the pool), and adding a variant or an operation makes the
//! compiler point at every arm that must learn it. A generic `Store<B>` would
//! have put the backend in every caller's types.
//!
//! # What every backend guarantees
//!
//! - The claim moves a run `queued → starting` in one guarded statement, committed before the
//!   call returns and so before anything is spawned: a run that stays `queued` while its worker
//!   starts could be handed out twice.
//! - The database itself refuses more active runs of one project than its `max_parallel`
//!   (one by default), whatever a packer decides: each active run holds a seat under a unique
//!   index, and the claim takes a free one or claims nothing (a packer that forgot the runs in
//!   flight after a restart is caught a second time).
//! - The claim refuses a run whose global or namespace cap (as the request carries them) is
//!   full, so no cap is exceeded even by claims racing on several connections or hosts (SQLite:
//!   a count under its one write lock; PostgreSQL: cap seats, see `postgres`).
//! - Every transition is checked against the one state machine in [`status`] and appended to
//!   the events, with the epoch and the occupancy at that moment, for `fleet check`.
//! - Writes that license a side effect carry the caller's epoch and are refused as
//!   [`StoreError::Fenced`] when another daemon has taken over since.
//! - A busy database (another connection holds the write lock past the busy timeout) surfaces
//!   as an error for which [`StoreError::is_busy`] is true: nothing was written, and the caller
//!   retries later, never in a spin.
//! - The events table is append-only: nothing updates or deletes an event, and every status
//!   write appends one in its own transaction.
//! - A schedule occurrence counts as handled only once its run row exists, inserted under the
//!   unique key (project, occurrence) in the transaction that moves the cursor.
//! - A failure hook's run is inserted by the transaction that writes the failed end (never for
//!   a hook's own run): an end is written once, so each failure queues its hook exactly once,
//!   crash or not.
//! - The `queue_heads` table holds, for each project with queued runs and for no other, its
//!   first queued run, kept by triggers that any writer of `runs` fires in its own transaction:
//!   reading the queue heads costs one row per project, whatever the backlog.
//! - Run ids are never reused (`AUTOINCREMENT`, an identity), because a run's files outlive its
//!   row; [`Store::reserve_run_ids`] numbers new runs above the run files a daemon finds, for a
//!   database restored from an older backup.
//!
//! Times are `i64` milliseconds since the Unix epoch, UTC ([`Millis`]).

mod activity;
pub mod db_clock;
mod decide;
mod error;
mod hosts;
mod model;
mod operator;
mod paused;
mod postgres;
mod prune;
mod sqlite;
pub mod status;
mod store;
mod store_hosts;
mod summary;
pub mod test_clock;

pub use activity::ProjectActivity;
pub use error::StoreError;
pub use hosts::{
    ended_by_forget, Forgotten, HostInfo, HostRow, HostState, LogTail, Place, Published,
    HEARTBEAT_EVERY_MS, LOG_TAIL_BYTES, SILENCE_MS,
};
pub use model::{
    local_now_ms, now_ms, rfc3339, Applied, CancelOutcome, Change, ClaimRefusal, ClaimRequest,
    Claimed, ClockBack, DaemonRow, Delayed, Event, FailureHook, FailureHooks, FireRequest, Fired,
    Millis, NewRun, OverlapPolicy, QueueHead, Reserved, Run, RunFilter, RunId, RunRows,
    ScheduleRow, Transition, UnreadableRun, MAX_RESERVE_JUMP,
};
pub use operator::{BulkCancelled, CancelSelection};
pub use paused::{HoldKind, Pause, Pauses};
pub use postgres::open::{
    check_tls_files as check_postgres_tls_files, describe_url as describe_postgres_url,
};
pub use postgres::url::{mask_password as mask_postgres_password, PASSWORD_MASK};
pub use prune::{Keep, PruneCandidate, PrunePolicy};
pub use status::{RunStatus, Trigger, ALL_STATUSES, ALL_TRIGGERS, TRANSITIONS};
pub use store::{ChangeProbe, Store, DEFAULT_BUSY_TIMEOUT};
pub use summary::{EndedTotal, QueueSummary};
