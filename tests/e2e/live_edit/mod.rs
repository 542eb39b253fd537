//! End-to-end tests of editing fleet.toml while the daemon runs: every rule of a live edit on
//! the real binary, and a property test (a few hundred mutated fleet.toml texts through reload:
//! each applied or refused naming the line, `fleet validate` agreeing, the daemon alive after all
//! of them, `fleet check` passing).
//!
//! Commands here are *gated*: a run records its start, then waits until the test creates
//! `gates/<run id>` (or `gates/all`), then records its end. So a run lasts exactly as long as the
//! test wants, and nothing depends on how fast this (loaded, 2-core) machine is. Starts and ends
//! go to a record file in the format of `common::read_records`, so every claim about overlap is
//! read from what the commands themselves saw.
//!
//! "The reload was processed" is observed on the public interface: `fleet status --json` shows
//! the caps in force (from the daemon's row) and `daemon.last_reload_error`. Where a test needs
//! to know that a reload of a *particular* text was processed, it first applies a sentinel config
//! whose global cap no other text uses (see `validate::apply_sentinel`).
//!
//! Run with `cargo test --all-features --test e2e live_edit::` (after `cargo build -p fleet
//! --all-features` if the binary may be stale).
//!
//! Helpers: `gates` (gated commands and their records), `reload` (edits, and reading what the
//! daemon made of them). One module per rule:
//! - `bad_edits`: an edit that fails to parse or validate changes nothing;
//! - `namespaces`: namespaces → none → namespaces, with runs in flight and a restart between;
//! - `lowered_caps`: lowering a cap below the current occupancy kills nothing;
//! - `removed_project`: a removed project's queued runs are cancelled, its active run finishes;
//! - `changed_command`: a changed command applies to new runs only;
//! - `moved_project`: a run counts in the namespace it started in;
//! - `newer_config`: nothing is ended on the strength of a config older than the file;
//! - `saves`: every way of saving is noticed (rename, truncate-and-write, symlink target, SIGHUP,
//!   `fleet reload`, an edit during start), and a half-written file is never applied;
//! - `validate`: `fleet validate` runs exactly the check the daemon runs;
//! - `state_dir`: a `state_dir` edit needs a restart, so it is refused;
//! - `property` (with `mutations`): mutated texts are applied or refused naming the line;
//! - `tick`: a reloaded `tick` takes effect.

mod gates;
mod reload;

mod bad_edits;
mod changed_command;
mod lowered_caps;
mod moved_project;
mod mutations;
mod namespaces;
mod newer_config;
mod property;
mod removed_project;
mod saves;
mod state_dir;
mod tick;
mod validate;
