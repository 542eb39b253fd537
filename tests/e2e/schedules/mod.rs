//! End-to-end tests of schedules on the real `fleet` binary: seconds-level cron timetables fire
//! exactly one run per occurrence; a daemon killed across occurrences catches up on the latest
//! one within `starting_deadline` and skips (visibly) the older ones, or skips it when it is too
//! late; a scheduled run in flight across a crash is adopted and its occurrence never fired
//! again; the overlap policies `forbid`, `queue` and `replace`; retries with exponential backoff;
//! time zones; `fleet runs` showing trigger and occurrence.
//!
//! No test waits for a real minute. Tests that need a daemon down across an occurrence "arm" a
//! schedule whose only occurrences are a few chosen whole seconds a little ahead (a seconds list,
//! so the next ones are a minute away): they start the daemon, wait until it persisted its
//! cursor with the first chosen second as the next one, and only then kill it. The wall clock is
//! then polled until the scenario's instant has passed (the scenario *is* the passing time).
//!
//! Run with `cargo test --all-features --test e2e schedules::` after `cargo build -p fleet
//! --all-features` (one test injects a crash through a failpoint).
//!
//! Helpers: `time` (RFC 3339 and New York time, independent of fleet's), `runs` (runs as `fleet
//! runs --json` shows them), `notes` (commands that note what they saw), `arming` (the config,
//! the schedule cursor, arming a schedule). One module per rule:
//! - `fires`: one run per occurrence, never early, never for the past;
//! - `missed`: occurrences missed while the daemon was down: the latest runs within
//!   `starting_deadline` or is skipped, the older ones are skipped and stay visible;
//! - `in_flight`: a scheduled run in flight across a crash is adopted or requeued, never fired
//!   again;
//! - `overlap`: the overlap policies `forbid`, `queue` and `replace`;
//! - `retries`: retries of a scheduled run back off exponentially, keeping its occurrence;
//! - `timezone`: a schedule's time zone;
//! - `runs_table`: `fleet runs` shows trigger and occurrence;
//! - `clock`: a clock that steps back (and one that jumps forward past many occurrences), on a
//!   daemon whose clock fleet's test clock shifts;
//! - `validate`: cron expressions through `fleet validate` and the daemon's load.

mod arming;
mod notes;
mod runs;

mod clock;
mod fires;
mod in_flight;
mod missed;
mod overlap;
mod retries;
mod runs_table;
mod timezone;
mod validate;
