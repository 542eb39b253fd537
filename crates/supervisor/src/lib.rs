//! fleet's supervisor: configuration, the EVAL loop, the slot pool, the shim and recovery.
//!
//! See docs/ARCHITECTURE.md for the bird's-eye view. In short: [`daemon`] owns the EVAL loop;
//! [`settle`] decides what became of a run from its run folder ([`shim::rundir`]), and [`retry`]
//! whether it gets another attempt; [`schedule`] is the cron timetable and the EVAL step that
//! fires it; [`shim`] is the per-run monitor process, which [`shim::forkserver`] forks without an
//! exec; [`slots`] is the in-memory slot pool; [`statedir`] the directory and its daemon lock;
//! [`control`] the socket through which commands nudge the daemon; [`config`] reads fleet.toml
//! and [`caps`] writes its caps down; [`check`] is the restart-safety checker behind
//! `fleet check`; [`failpoints`] the register of every crash point tests inject; [`clock`] how
//! persisted instants survive a wall clock that steps back; [`sys`] every
//! raw system call, behind safe functions.

pub mod caps;
pub mod check;
pub mod clock;
pub mod config;
pub mod control;
pub mod daemon;
pub mod failpoints;
pub mod retry;
pub mod schedule;
pub mod settle;
pub mod shim;
pub mod slots;
pub mod statedir;
pub mod sys;
pub mod watch;
