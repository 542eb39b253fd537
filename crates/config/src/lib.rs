//! fleet's configuration: `fleet.toml` read, validated and resolved, and the cron model that the
//! daemon and the commands share (a schedule's timetable, what is due at `now`, its next
//! occurrence).
//!
//! See docs/ARCHITECTURE.md for the bird's-eye view and the code map.
//!
//! The file is parsed with `toml`'s span-preserving document parser and validated by hand, so
//! that every problem names the file, the 1-based line and the dotted key, and so that *all*
//! problems are reported together (a TOML syntax error alone stops parsing). Every accepted key
//! is listed in [`KEYS`]; the unknown-key check is derived from it, and a test keeps it in step
//! with docs/CONFIG.md.
//!
//! # Layout
//!
//! * `model`: the validated types ([`Config`], [`NamespaceConfig`], [`ProjectConfig`],
//!   [`Overlap`]), the defaults, the key register and the shared value rules
//!   ([`valid_name`]).
//! * `cron`: the cron expressions a schedule accepts ([`parse_schedule`], its [`MACROS`]).
//! * `load`: reading the file ([`Config::load`], [`Config::parse`], [`Config::state_dir_of`]).
//! * `validate`: the validation itself, one small function per key.
//! * `paths`: resolving the relative paths the file names against its folder (used by both
//!   `load` and `validate`, so that `load` → `validate` → `paths` has no cycle).
//! * `database`: the `database` key ([`DatabaseUrl`]: a PostgreSQL URL that never prints its
//!   password).
//! * `host`: the host keys' data and rules ([`HostConfig`], [`valid_host_name`],
//!   [`machine_hostname`], the default of `host`).
//! * `published`: what a host publishes of its file on a shared database ([`published_text`]:
//!   the `database` password masked) and the digest hosts compare ([`published_digest`]).
//! * `retention`: [`Retention`], how much history and log a project keeps.
//! * [`schedule`]: the cron model: the timetable, and the next occurrence `fleet projects`
//!   shows.
//! * [`clock`]: how far ahead of the clock a persisted instant may be before it counts as
//!   written by a clock that has since stepped back.
//! * `error`: [`ConfigError`] and [`ConfigErrors`], and how they display.
//!
//! Nothing here starts, stops or records a run, opens the database or reads the clock: a
//! `Config` is plain data that the daemon and the commands read, and every timetable question
//! takes `now` as a parameter.

pub mod clock;
mod cron;
mod database;
mod error;
mod host;
mod load;
mod model;
mod paths;
mod published;
mod retention;
pub mod schedule;
mod validate;

#[cfg(test)]
mod tests;

pub use cron::{parse_schedule, MACROS};
pub use database::DatabaseUrl;
pub use error::{ConfigError, ConfigErrors};
pub use host::{
    digest, host_name_problem, machine_hostname, name_this_host, valid_host_name, HostConfig,
    ANY_HOST, MACHINE_HOSTNAME, MAX_HOST_NAME,
};
pub use model::{
    valid_name, Config, HttpListen, LogFormat, NamespaceConfig, Overlap, ProjectConfig,
    DEFAULT_NAMESPACE, INHERITED, KEYS, MAX_CAP, MIN_STARTING_DEADLINE, MIN_TICK, REQUIRED, UNSET,
};
pub use published::{published_digest, published_text};
pub use retention::{
    Retention, DEFAULT_KEEP_FOR, DEFAULT_KEEP_RUNS, DEFAULT_MAX_LOG_SIZE, OFF as RETENTION_OFF,
};
