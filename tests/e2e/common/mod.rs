//! The one harness of the end-to-end tests: it drives the real `fleet` binary and real processes.
//! Every test module of tests/e2e uses it (`use crate::common::*;`).
//!
//! Every test gets a [`Fleet`]: a temporary folder holding a `fleet.toml` the test writes (the
//! state directory defaults to `.fleet` inside it). Every process the harness starts carries
//! `FLEET_E2E_MARKER=<unique>` in its environment; the daemon passes its environment on to the
//! shims and the commands, so when the [`Fleet`] is dropped every leftover process of *this* test
//! (and no other test's) is found through `/proc/<pid>/environ` and killed.
//!
//! Synchronisation is by polling a condition with a deadline ([`Fleet::wait_until`],
//! [`wait_for`]), never by sleeping a fixed time. The harness never touches a process that does
//! not carry its test's marker, except to read /proc.
//!
//! By concern:
//! - `bin`: which `fleet` binary runs (`FLEET_BIN`, a private copy for long tests);
//! - `config`: text for fleet.toml (TOML strings, argv, shell words) and replacing the file;
//! - `command`: running one `fleet` command to its end with a deadline ([`Output`]);
//! - `fleet`: the [`Fleet`] itself: its folder, `fleet` commands, waits on runs, diagnostics;
//! - `daemon`: the [`Daemon`] handle (start, wait until it holds the state directory, kill);
//! - `poll`: polling with a deadline, and the wall clock;
//! - `procs`: /proc, signals, the daemon lock;
//! - `records`: commands that record their start and end, and the overlap sweep over them;
//! - `db`: reading fleet's database directly, for what no command shows;
//! - `run_files`: a run's records as its shim left them on disk.
//!
//! And, used by name (`common::time::parse_rfc3339`) rather than through the re-exports:
//! - `restart`: gated commands, EVAL barriers, epochs, `fleet check` reports (the restart and
//!   PostgreSQL tests);
//! - `time`: RFC 3339 and New York time, independent of fleet's code;
//! - `http_client`: a minimal HTTP/1.1 client, and the address the daemon bound;
//! - `cdp`: headless Chromium over the DevTools protocol, for the dashboard.

// Not every part of the harness (nor of its re-exports) is used by some test.
#![allow(dead_code, unused_imports)]

mod bin;
mod command;
mod config;
mod daemon;
mod db;
mod fleet;
mod poll;
mod procs;
mod records;
mod run_files;

pub mod cdp;
pub mod http_client;
pub mod restart;
pub mod time;

use std::time::Duration;

pub use bin::*;
pub use command::*;
pub use config::*;
pub use daemon::*;
pub use db::*;
pub use fleet::*;
pub use poll::*;
pub use procs::*;
pub use records::*;
pub use run_files::*;

/// The environment variable that marks every process started for one test.
pub const MARKER_VAR: &str = "FLEET_E2E_MARKER";

/// How long a polled condition may take before the test fails. Generous: CI is a noisy 2-core VM.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How long a single `fleet` command (not the daemon) may take before the test fails.
pub const CMD_DEADLINE: Duration = Duration::from_secs(60);
