//! fleet's supervisor: configuration, the EVAL loop, the slot pool, the shim and recovery.
//!
//! See docs/ARCHITECTURE.md for the bird's-eye view. In short: [`daemon`] owns the EVAL loop;
//! [`settle`] decides what became of a run from its run folder ([`shim::rundir`]), and [`retry`]
//! whether it gets another attempt; [`schedule`] is the cron timetable and the EVAL step that
//! fires it; [`shim`] is the per-run monitor process, which [`shim::forkserver`] forks without an
//! exec; [`slots`] is the in-memory slot pool; [`statedir`] the directory and its daemon lock;
//! [`control`] the socket through which commands nudge the daemon; [`config`] reads fleet.toml
//! and [`caps`] writes its caps down; [`check`] is the restart-safety checker behind
//! `fleet check`; [`exec_limits`] the kernel's limits on one exec's arguments;
//! [`failpoints`] the register of every crash point tests inject; [`sys`] every
//! raw system call, behind safe functions.

// The daemon and the shims run with whatever stdout and stderr they were given, which may be a
// pipe nobody reads any more: `print!` and `eprintln!` panic then. Logs go through `tracing`,
// and the shim's few lines through a write that ignores failure.
#![deny(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)]

pub mod caps;
pub mod check;
pub mod config;
pub mod control;
pub mod daemon;
pub mod exec_limits;
pub mod failpoints;
pub mod retry;
pub mod schedule;
pub mod settle;
pub mod shim;
pub mod slots;
pub mod statedir;
pub mod sys;
pub mod watch;
