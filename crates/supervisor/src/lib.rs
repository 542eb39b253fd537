//! fleet's supervisor: configuration, the EVAL loop, the slot pool, the shim and recovery.
//!
//! See docs/ARCHITECTURE.md for the bird's-eye view. In short: [`daemon`] owns the EVAL loop;
//! [`fate`] decides what became of a run from its run folder ([`shim::rundir`]); [`shim`] is the
//! per-run monitor process, which [`shim::forkserver`] forks without an exec; [`pool`] is the
//! in-memory slot pool; [`statedir`] the directory and its daemon lock; [`control`] the socket
//! through which commands nudge the daemon; [`config`] reads fleet.toml; [`check`] is the
//! restart-safety checker behind `fleet check`; [`failpoints`] the register of every crash point
//! tests inject; [`sys`] every raw system call, behind safe functions.

pub mod check;
pub mod config;
pub mod control;
pub mod daemon;
pub mod failpoints;
pub mod fate;
pub mod firing;
pub mod pool;
pub mod schedule;
pub mod shim;
pub mod statedir;
pub mod sys;
pub mod watch;

/// The fork server's former path; the module is [`shim::forkserver`]. Kept while code written
/// against the old layout (the daemon, the CLI, the tests) moves to the new path.
#[doc(hidden)]
pub use shim::forkserver;

/// The run folder's former path; the module is [`shim::rundir`], and `proc_start_time` is
/// [`sys::process::start_time`]. Kept while code written against the old layout (the daemon,
/// `fate`, the CLI, the tests) moves to the new paths.
#[doc(hidden)]
pub mod runfiles {
    pub use crate::shim::rundir::*;
    pub use crate::sys::process::start_time as proc_start_time;
}
