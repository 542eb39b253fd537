//! Reading fleet.toml: the file's bytes and its text.
//!
//! This module turns a path into a [`Config`] (or the errors that stop it), and finds the state
//! directory of a file that may not be valid. It never validates keys itself: every key is
//! checked by `check`, so that there is one place deciding what a valid file is; and it never
//! resolves a path by its own rule (that is `paths`).

use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use super::model::DEFAULT_STATE_DIR;
use super::paths::{resolve_against, resolve_dir};
use super::validate;
use super::{Config, ConfigError, ConfigErrors, DatabaseUrl};

impl Config {
    /// Reads and parses the file at `path`.
    ///
    /// # Errors
    ///
    /// Every problem in the file (see [`Config::parse`]); an unreadable or missing file is one
    /// error naming it with no line, and text that is not UTF-8 one error at the first bad line.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let bytes = std::fs::read(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: path.to_path_buf(),
                line: None,
                key: String::new(),
                message: format!("cannot read file: {e}"),
            }])
        })?;
        match std::str::from_utf8(&bytes) {
            Ok(text) => Config::parse(text, path),
            Err(e) => {
                let upto = e.valid_up_to();
                let line = 1 + bytes[..upto].iter().filter(|&&b| b == b'\n').count();
                Err(ConfigErrors(vec![ConfigError {
                    file: path.to_path_buf(),
                    line: Some(line),
                    key: String::new(),
                    message: "file is not valid UTF-8".to_string(),
                }]))
            }
        }
    }

    /// Parses and validates `text`. `path` names the file in messages, and its folder is the
    /// base for relative paths (canonicalized when it exists, else made absolute against the
    /// current directory).
    ///
    /// # Errors
    ///
    /// Every problem found, in line order, each naming the file, line and dotted key. A TOML
    /// syntax error is reported alone, since nothing after it can be trusted.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigErrors> {
        validate::validate(text, path)
    }

    /// A published config's `text` as it is in force on the host whose own config is `here`:
    /// parsed and validated as a local file would be (`path` names it in messages), then this
    /// host's own keys kept from `here` (`host`, `state_dir`, `database`, `http_listen`,
    /// `log_format`), since those say where this host keeps its state, not how the fleet runs.
    /// The daemon applies a published version this way, and `fleet hosts forget` reads the
    /// retry policy and failure hooks in force the same way.
    ///
    /// # Errors
    ///
    /// As [`Config::parse`]: the published text is not a config this build can use.
    pub fn published_here(text: &str, path: &Path, here: &Config) -> Result<Config, ConfigErrors> {
        let mut new = Config::parse(text, path)?;
        new.host.clone_from(&here.host);
        new.state_dir.clone_from(&here.state_dir);
        new.database.clone_from(&here.database);
        new.http_listen.clone_from(&here.http_listen);
        new.log_format = here.log_format;
        Ok(new)
    }

    /// The state directory a config file names, found even when the rest of the file is
    /// invalid — so that `fleet status` can show a refused edit, and `fleet runs` keeps working,
    /// while the operator fixes a typo. `None` when the file cannot be read, or its `state_dir`
    /// itself cannot be made out.
    pub fn state_dir_of(path: &Path) -> Option<PathBuf> {
        let text = std::fs::read_to_string(path).ok()?;
        let dir = resolve_dir(path);
        let Ok(root) = DeTable::parse(&text) else {
            return state_dir_line(&text, &dir);
        };
        match root.get_ref().get("state_dir") {
            None => Some(resolve_against(&dir, DEFAULT_STATE_DIR)),
            Some(v) => match v.get_ref() {
                DeValue::String(s) if !s.is_empty() && !s.contains('\0') => {
                    Some(resolve_against(&dir, s))
                }
                _ => None,
            },
        }
    }

    /// The `database` a config file names, found even when the rest of the file is invalid (as
    /// [`Config::state_dir_of`], so that read-only commands keep reading the right database).
    /// `Some(None)`: no `database` key (or no file to read): SQLite in the state directory.
    /// `None`: the file names a database that cannot be made out (a bad URL, or a file that does
    /// not parse as TOML and has a `database` line) — never guessed to be SQLite.
    pub fn database_of(path: &Path) -> Option<Option<DatabaseUrl>> {
        let Ok(text) = std::fs::read_to_string(path) else {
            return Some(None);
        };
        let Ok(root) = DeTable::parse(&text) else {
            let names_one = text.lines().any(|l| l.trim_start().starts_with("database"));
            return if names_one { None } else { Some(None) };
        };
        match root.get_ref().get("database") {
            None => Some(None),
            Some(v) => match v.get_ref() {
                DeValue::String(s) => DatabaseUrl::parse(s).ok().map(Some),
                _ => None,
            },
        }
    }
}

/// The state directory of a file that does not parse as TOML: a top-level `state_dir = "..."`
/// line (before any table) can still be read on its own; a file with no such line uses the
/// default. `None` when such a line is there but its value cannot be made out.
fn state_dir_line(text: &str, dir: &Path) -> Option<PathBuf> {
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            break;
        }
        let Some(rest) = line.strip_prefix("state_dir") else {
            continue;
        };
        let value = rest.trim_start().strip_prefix('=')?.trim();
        let value = value.split('#').next().unwrap_or("").trim();
        let inner = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))?;
        if inner.is_empty() || inner.contains(['\\', '"', '\0']) {
            return None;
        }
        found = Some(resolve_against(dir, inner));
    }
    Some(found.unwrap_or_else(|| resolve_against(dir, DEFAULT_STATE_DIR)))
}
