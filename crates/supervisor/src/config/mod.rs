//! `fleet.toml`: reading, validating and resolving the configuration.
//!
//! The file is parsed with `toml`'s span-preserving document parser and validated by hand, so
//! that every problem names the file, the 1-based line and the dotted key, and so that *all*
//! problems are reported together (a TOML syntax error alone stops parsing). Every accepted key
//! is listed in [`KEYS`]; the unknown-key check is derived from it, and a test keeps it in step
//! with docs/CONFIG.md.
//!
//! The parts:
//!
//! * `model`: the validated types ([`Config`], [`NamespaceConfig`], [`ProjectConfig`],
//!   [`Overlap`]), the defaults, the key register and the shared value rules
//!   ([`parse_schedule`], [`valid_name`]).
//! * `load`: reading the file and resolving the paths it names ([`Config::load`],
//!   [`Config::parse`], [`Config::state_dir_of`]).
//! * `check`: the validation itself, one small function per key.
//! * `error`: [`ConfigError`] and [`ConfigErrors`], and how they display.
//!
//! Nothing here starts, stops or records a run: a `Config` is plain data that the daemon reads.

mod check;
mod error;
mod load;
mod model;

#[cfg(test)]
mod tests;

pub use error::{ConfigError, ConfigErrors};
pub use model::{
    parse_schedule, valid_name, Config, NamespaceConfig, Overlap, ProjectConfig, DEFAULT_NAMESPACE,
    KEYS, MIN_TICK, REQUIRED, UNSET,
};
