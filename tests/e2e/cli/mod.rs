//! End-to-end tests of the command line's own behaviour, whatever the command does:
//!
//! - `closed_pipe`: output into a pipe whose reader left (stdout or stderr, every command, and
//!   the daemon's log) ends quietly, never in a panic or an error blaming something else;
//! - `json`: every `--json` prints JSON, its errors included;
//! - `usage`: usage lines show optional options as optional;
//! - `argv_limit`: a command past the kernel's exec limits fails naming the command and the
//!   limit, and `fleet validate` warns about it beforehand;
//! - `manual`: shell completions and the man pages name every command.
//!
//! Every test drives the real `fleet` binary (see tests/e2e/common/mod.rs); `pipes` is this
//! group's helper for running a command into a closed pipe.

mod argv_limit;
mod closed_pipe;
mod json;
mod manual;
mod pipes;
mod usage;
