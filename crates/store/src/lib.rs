//! fleet's store: the database schema, its migrations, and every SQL statement of the project.
//!
//! Nothing outside this crate speaks SQL. The API speaks in operations — enqueue, claim,
//! apply transitions, queue heads, take over — so that a second database can offer the same
//! operations without the supervisor changing.
//!
//! # Layout
//!
//! - `model`: the row types ([`Run`], [`NewRun`], [`Transition`], [`Event`], …), [`Millis`].
//! - `error`: [`StoreError`], and which failures may be retried ([`StoreError::is_busy`]).
//! - [`status`]: the one run state machine ([`RunStatus`], [`TRANSITIONS`]).
//! - `operator`: the bulk cancel's selection and result ([`CancelSelection`], [`BulkCancelled`]).
//! - `store`: [`Store`], the one handle callers use, and [`ChangeProbe`]: fronts over a backend.
//! - `sqlite`: the SQLite backend, one file per concern; the only code that touches `rusqlite`.
//!
//! The first four are backend-neutral and never name SQL; their public items are re-exported at
//! the crate root.
//!
//! # Where a second backend plugs in
//!
//! [`Store`] holds a private `enum Backend { Sqlite(..) }` and each of its methods is one
//! `match` on it. A PostgreSQL backend becomes a second variant, a `postgres/` folder beside
//! `sqlite/` offering the same methods, and a constructor on [`Store`]; callers keep calling
//! the same `Store` methods and compile unchanged. An enum rather than a trait object because
//! the set of backends is closed and known here: with one variant the `match` compiles to a
//! direct call (no vtable, no allocation, nothing to clone but the pool), and adding a variant
//! makes the compiler point at every operation that must learn it. A generic `Store<B>` would
//! have put the backend in every caller's types.
//!
//! # What every backend guarantees
//!
//! - The claim moves a run `queued → starting` in one guarded statement, committed before the
//!   call returns and so before anything is spawned: a run that stays `queued` while its worker
//!   starts could be handed out twice.
//! - The database itself refuses a second active run of one project, whatever a packer decides
//!   (a packer that forgot the runs in flight after a restart is caught a second time).
//! - Every transition is checked against the one state machine in [`status`] and appended to
//!   the events, with the epoch and the occupancy at that moment, for `fleet check`.
//! - Writes that license a side effect carry the caller's epoch and are refused as
//!   [`StoreError::Fenced`] when another daemon has taken over since.
//! - A busy database (another connection holds the write lock past the busy timeout) surfaces
//!   as an error for which [`StoreError::is_busy`] is true: nothing was written, and the caller
//!   retries later, never in a spin.
//!
//! Times are `i64` milliseconds since the Unix epoch, UTC ([`Millis`]).

mod error;
mod model;
mod operator;
mod prune;
mod sqlite;
pub mod status;
mod store;
pub mod test_clock;

pub use error::StoreError;
pub use model::{
    now_ms, rfc3339, Applied, CancelOutcome, Change, ClaimRequest, Claimed, ClockBack, DaemonRow,
    Delayed, Event, FireRequest, Fired, Millis, NewRun, OverlapPolicy, QueueHead, Run, RunFilter,
    RunId, ScheduleRow, Transition,
};
pub use operator::{BulkCancelled, CancelSelection};
pub use prune::{Keep, PruneCandidate, PrunePolicy};
pub use status::{RunStatus, Trigger, ALL_STATUSES, ALL_TRIGGERS, TRANSITIONS};
pub use store::{ChangeProbe, Store, DEFAULT_BUSY_TIMEOUT};
