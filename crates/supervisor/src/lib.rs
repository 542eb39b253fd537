//! fleet's supervisor: the EVAL loop, the slot pool, the shim and recovery.
//!
//! See docs/ARCHITECTURE.md for the bird's-eye view and the code map. What it reads and shares
//! lives in crates of its own: fleet.toml and the cron timetable (`config`), the loop's heartbeat
//! (`health`), the HTTP listener the daemon starts (`fleet-http`), the run files (`runrecord`),
//! the database (`store`) and the packing decision (`packer`).
//!
//! # Layout
//!
//! - [`daemon`]: the daemon: takeover, recovery, and the EVAL loop, one file per phase.
//! - [`settle`]: what became of one claim, decided from its run files (reap and
//!   recovery alike).
//! - [`boot`]: which claims a restart of the machine may have cut short (the boot each
//!   daemon ran in, recorded in the state directory).
//! - [`retry`]: whether a run that ended gets another attempt, and when (exponential backoff
//!   from `retry_backoff`, capped at one hour).
//! - [`schedule`]: the EVAL step that fires due occurrences (the timetable is
//!   [`config::schedule`]'s).
//! - [`shim`]: the per-run monitor process, the writer of its run files (their format is
//!   `runrecord`'s), and the fork server that forks it.
//! - `slots` (crate-private): the slot pool, the runs this daemon process supervises, in memory.
//! - [`statedir`]: the state directory's paths and the daemon lock.
//! - [`control`]: the control socket through which commands nudge the daemon.
//! - `watch` (crate-private): noticing edits of fleet.toml (a watcher on its folder, polling as
//!   a fallback).
//! - [`prune`]: pruning ended runs (rows and files) by the retention keys, for the daemon and
//!   `fleet prune`.
//! - [`caps`]: the caps in force, written down for the daemon row and `fleet status`.
//! - [`audit`]: the restart-safety auditor behind `fleet check`; it only reads.
//! - `backoff` (crate-private): a wait that doubles with each failure in a row up to a cap,
//!   and when the next try is due, from a `now` handed in (every back-off of the daemon and the
//!   shim).
//! - [`clock`]: queued runs' delays counted again after the wall clock stepped back (the
//!   tolerance, and how every persisted instant survives a step, is [`config::clock`]).
//! - [`exec_limits`]: the kernel's limits on one exec's arguments, and the message naming them.
//! - [`failpoints`]: the register of every crash point tests inject, with its recovery story.
//! - [`sys`]: every raw system call, behind safe functions.
//!
//! The crate-private modules are used by nothing outside the crate (the `fleet` binary, the
//! benches, the tests), so the compiler keeps checking them for dead code.

// The daemon and the shims run with whatever stdout and stderr they were given, which may be a
// pipe nobody reads any more: `print!` and `eprintln!` panic then. Logs go through `tracing`,
// and the shim's few lines through a write that ignores failure.
#![deny(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)]

pub mod audit;
pub(crate) mod backoff;
pub mod boot;
pub mod caps;
pub mod clock;
pub mod control;
pub mod core;
pub mod daemon;
pub mod exec_limits;
pub mod failpoints;
pub mod prune;
pub mod retry;
pub mod schedule;
pub mod settle;
pub mod shim;
pub mod slots;
pub mod statedir;
pub mod sys;
pub(crate) mod watch;
