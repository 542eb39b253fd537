//! The store's integration tests, one test binary (one link) for all of them. Each test runs on
//! both backends (`MODULE::sqlite::NAME`, `MODULE::postgres::NAME`; see `common`, whose
//! `both_backends!` every module uses):
//!
//! - `runs`: the claim, the unique index, the state machine, cancels and a busy database;
//! - `claims`, `claim_errors`: claims from several stores at once, and claims that fail;
//! - `seats`: a project's `max_parallel` held by the database;
//! - `queue_heads`: the queue heads table against its definition;
//! - `races`, `open`, `ignored_writes`, `unreadable_rows`: several writers, opening a new
//!   database at once, writes another program drops, rows fleet cannot read;
//! - `schedules`, `occurrence_atomicity`, `clock`: firing occurrences, and a clock that stepped
//!   back;
//! - `hooks`, `operator`, `prune`, `summary`, `run_ids`, `hosts`: failure hooks, the operator's
//!   operations, pruning, the monitoring totals, run ids, many hosts on one database;
//! - `read_only`: SQLite opened for reading only (that backend alone); `pg_read_only`: the
//!   same for PostgreSQL, and roles that may only read, or read and write but not create.
//!
//! Proptest keeps the cases it once shrank a failure to in `../proptest-regressions/<module>.txt`
//! (its default place for a test binary in a folder with a `main.rs`) and runs them first.

#[macro_use]
mod common;

mod claim_errors;
mod claims;
mod clock;
mod hooks;
mod hosts;
mod ignored_writes;
mod occurrence_atomicity;
mod open;
mod operator;
mod pg_read_only;
mod pg_tls;
mod prune;
mod queue_heads;
mod races;
mod read_only;
mod run_ids;
mod runs;
mod schedules;
mod seats;
mod summary;
mod unreadable_rows;
