//! fleet's supervisor: configuration, the EVAL loop, the slot pool, the shim and recovery.
//!
//! See docs/ARCHITECTURE.md for the bird's-eye view. In short: [`daemon`] owns the EVAL loop;
//! [`fate`] decides what became of a run from its [`runfiles`]; [`shim`] is the per-run monitor
//! process, which [`forkserver`] forks without an exec; [`pool`] is the in-memory slot pool; [`statedir`] the directory and its daemon lock;
//! [`control`] the socket through which commands nudge the daemon; [`config`] reads fleet.toml;
//! [`check`] is the restart-safety checker behind `fleet check`.

pub mod check;
pub mod config;
pub mod control;
pub mod daemon;
pub mod failpoints;
pub mod fate;
pub mod firing;
pub mod forkserver;
pub mod pool;
pub mod runfiles;
pub mod schedule;
pub mod shim;
pub mod statedir;
pub mod watch;
