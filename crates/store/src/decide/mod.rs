//! The backend-neutral decisions of the store: pure functions over the model types that say
//! *what* a write must be, so that each rule is written once and every backend obeys the same
//! one.
//!
//! A backend reads what a decision needs (the run, its cancel request, the project's queued and
//! active runs, …) inside its own transaction, calls the function here, and then only *executes*
//! the returned plan with its own SQL, in the order the plan documents. Nothing here may speak
//! SQL, touch a connection or read the clock: everything comes in as arguments, which is what
//! keeps these functions unit-testable without a database.
//!
//! SQL text that differs only in dialect (placeholders, casts, `RETURNING`, locks) stays in each
//! backend, and so does code that only has the same shape because both drivers hand out rows
//! (`rusqlite::Row` and `postgres::Row` share no trait).
//!
//! Files: `transition` (checking a transition, the end's note, the retry and the failure hook's
//! run, and the order a backend writes them in), `schedule` (what firing an occurrence writes:
//! queue, skip, replace), `prune` (which runs a prune may take), `run_columns` (the `runs`
//! column list and what its text columns mean), `clock` (a delay written by a clock that
//! stepped back, counted again), `claim` (the caps a claim must find room under, a project's
//! lowest free seat, a config version in force), `cancel` (what cancelling a run of a given
//! status writes), `hosts` (which epoch may write, whether a host may be forgotten, what
//! forgetting a host does to its runs), `run_ids` (moving the next run id past a given one),
//! `schema` (which schema versions a store opened for reading only reads as they are).

pub(crate) mod cancel;
pub(crate) mod claim;
pub(crate) mod clock;
pub(crate) mod hosts;
pub(crate) mod prune;
pub(crate) mod run_columns;
pub(crate) mod run_ids;
pub(crate) mod schedule;
pub(crate) mod schema;
pub(crate) mod transition;
