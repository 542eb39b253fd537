//! Validation of a parsed fleet.toml, by hand, so that every problem names the file, the 1-based
//! line and the dotted key, and so that *all* problems are reported together.
//!
//! `checker` holds the `Checker` core: mapping spans to lines, reporting syntax errors,
//! refusing unknown keys (derived from `KEYS`) and the typed expectations every key builds on
//! (table, string, integer in a range, duration, cap). Each key is then validated by its own
//! small function: the top-level keys in `root`, `[namespaces.<name>]` in `namespace`,
//! `[projects.<name>]` in `project`, the host keys (`host`, `[hosts.<name>]`, a project's
//! `hosts`) in `hosts`, and the retention keys (`keep_runs`, `keep_for`, `max_log_size`) in
//! `retention`. A check never stops at the first problem it finds (only a
//! TOML syntax error stops parsing), and never reads the file system beyond resolving the
//! config's folder.

use std::path::Path;

use toml::de::DeTable;

use super::{Config, ConfigErrors};
use checker::Checker;

pub(super) mod checker;
mod hosts;
mod namespace;
mod project;
mod retention;
mod root;

/// Parses and validates `text`, the contents of the config file `path`.
pub(super) fn validate(text: &str, path: &Path) -> Result<Config, ConfigErrors> {
    let mut cx = Checker::new(text, path);
    let root = match DeTable::parse(text) {
        Ok(root) => root,
        Err(e) => {
            cx.syntax_error(&e);
            return Err(cx.finish());
        }
    };
    let config = cx.config(root.get_ref(), path);
    if cx.errors.is_empty() {
        Ok(config)
    } else {
        Err(cx.finish())
    }
}
