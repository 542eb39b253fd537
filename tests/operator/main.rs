//! End-to-end tests of the operator's everyday verbs, on the real `fleet` binary:
//!
//! - `wait`: `fleet wait` and `fleet enqueue --wait` end with the command's exit status,
//!   following retries, across a daemon killed and restarted, and within `--timeout`;
//! - `args`: a run's own arguments and environment (`enqueue -- ARG…`, `--env`), refused for
//!   a project without `accept_args`, never read by a shell, kept by retries;
//! - `rerun`: `fleet rerun` repeats a run with its arguments;
//! - `cancel`: several ids, a project, a namespace, everything, `--queued`;
//! - `manual`: shell completions and the man pages name every command;
//! - `priority`: higher priorities first, and the runs table shows them.
//!
//! Every test drives the real `fleet` binary (see tests/common/mod.rs); `bg` here runs a `fleet`
//! command in the background for the tests that act while it waits.

#[path = "../common/mod.rs"]
mod common;

mod args;
mod cancel;
mod manual;
mod priority;
mod rerun;
mod wait;

use std::process::Command;
use std::thread::JoinHandle;

use common::{run_with_deadline, Output, CMD_DEADLINE};

/// Runs `cmd` to its end (with the harness's deadline) on a thread of its own: for a `fleet
/// wait` the test acts on while it blocks.
pub fn bg(cmd: Command) -> JoinHandle<Output> {
    std::thread::spawn(move || run_with_deadline(cmd, CMD_DEADLINE))
}
