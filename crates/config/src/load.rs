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
        let bytes = std::fs::read(path).map_err(|e| ConfigErrors::unreadable(path, &e))?;
        Config::from_bytes(&bytes, path)
    }

    /// Parses `bytes`, read from the file at `path`, as [`Config::load`] does: for a caller
    /// that needs the bytes it parsed (to digest or publish exactly what it applied).
    ///
    /// # Errors
    ///
    /// As [`Config::load`], but for reading the file.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Config, ConfigErrors> {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                let config = Config::parse(text, path)?;
                // The TLS files of the `database` URL are read here, in this host's own file,
                // not by `parse`, which also reads texts other hosts published, whose files are
                // theirs (a published `database` is replaced by this host's anyway).
                if let Some(db) = &config.database {
                    store::check_postgres_tls_files(db.secret_url()).map_err(|message| {
                        ConfigErrors(vec![ConfigError {
                            file: path.to_path_buf(),
                            line: key_line(text, "database"),
                            key: "database".into(),
                            message,
                        }])
                    })?;
                }
                Ok(config)
            }
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
    /// while the operator fixes a typo. `None` when it cannot be known for certain: the file
    /// cannot be read; its `state_dir` cannot be made out; it has no `state_dir` but a string
    /// under a top-level key fleet does not know that looks like it (`stat_dir`, `state-dir`,
    /// `data_dir`: perhaps `state_dir` mistyped, and the default the wrong folder); or a syntax error comes before its `state_dir`, or on that
    /// line (what follows an error cannot be read).
    pub fn state_dir_of(path: &Path) -> Option<PathBuf> {
        let text = std::fs::read_to_string(path).ok()?;
        let dir = resolve_dir(path);
        let (root, certain) = top_level(&text)?;
        if !certain {
            return None;
        }
        match root.get("state_dir") {
            Some(v) => match v.get_ref() {
                DeValue::String(s) if !s.is_empty() && !s.contains('\0') => {
                    Some(resolve_against(&dir, s))
                }
                _ => None,
            },
            None => {
                // A string under a key fleet does not know that looks like `state_dir` may be
                // that key mistyped: the default would then be another folder.
                let known = crate::validate::checker::allowed_keys("");
                root.iter()
                    .all(|(k, v)| {
                        let k = k.get_ref().as_ref();
                        known.contains(&k)
                            || !matches!(v.get_ref(), DeValue::String(_))
                            || !looks_like_state_dir(k)
                    })
                    .then(|| resolve_against(&dir, DEFAULT_STATE_DIR))
            }
        }
    }

    /// The `database` a config file names, found even when the rest of the file is invalid (as
    /// [`Config::state_dir_of`], so that read-only commands keep reading the right database).
    /// `Some(None)`: no `database` key (or no file to read): SQLite in the state directory.
    /// `None`: the file names a database that cannot be made out (a bad URL, TLS files that
    /// cannot be used, or a file that does not parse as TOML and has a `database` line) — never
    /// guessed to be SQLite.
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
                // This host's own file: its TLS files are checked too, as `load` does.
                DeValue::String(s) => DatabaseUrl::parse(s)
                    .ok()
                    .filter(|db| store::check_postgres_tls_files(db.secret_url()).is_ok())
                    .map(Some),
                _ => None,
            },
        }
    }
}

/// Whether the top-level key `key` (not one fleet knows) may be `state_dir` mistyped: it names
/// a state or a folder, or is within two edits of `state_dir` (`-` read as `_`, any case).
fn looks_like_state_dir(key: &str) -> bool {
    let key = key.to_lowercase().replace('-', "_");
    key.contains("state") || key.contains("dir") || edit_distance(&key, "state_dir") <= 2
}

/// The Levenshtein distance between `a` and `b`, by character.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The 1-based line of the top-level `key` in `text` (a file that parses).
fn key_line(text: &str, key: &str) -> Option<usize> {
    let root = DeTable::parse(text).ok()?;
    let (k, _) = root
        .get_ref()
        .iter()
        .find(|(k, _)| k.get_ref().as_ref() == key)?;
    let at = k.span().start.min(text.len());
    Some(1 + text[..at].bytes().filter(|&b| b == b'\n').count())
}

/// A key no config has, added after the text read by [`top_level`] to find out whether it
/// lands at the top level.
const PROBE_KEY: &str = "__fleet_top_level_probe__";

/// The top-level keys of the config `text` as far as they can be read for certain, and whether
/// the file can hold no other `state_dir` than those show. A file that parses: its whole root
/// table. One with a syntax error: the root table of the lines before the error's line, and
/// whether no `state_dir` can follow — a table header came before the error (no top-level key
/// follows one), or no line from the error to the first header names `state_dir`. Nothing
/// when the lines before the error do not parse either.
fn top_level(text: &str) -> Option<(DeTable<'_>, bool)> {
    let error = match DeTable::parse(text) {
        Ok(root) => return Some((root.into_inner(), true)),
        Err(e) => e,
    };
    let at = error.span()?.start.min(text.len());
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let before = &text[..line_start];
    let root = DeTable::parse(before).ok()?.into_inner();
    // A key added at the end lands at the top level only if no table header came before it.
    let probed = format!("{before}\n{PROBE_KEY} = 0\n");
    let closed = DeTable::parse(&probed).is_ok_and(|t| !t.get_ref().contains_key(PROBE_KEY));
    let names_state_dir = |line: &str| {
        let line = line.trim_start();
        ["state_dir", "\"state_dir\"", "'state_dir'"]
            .iter()
            .any(|k| line.starts_with(k))
    };
    let none_after = closed
        || !text[line_start..]
            .lines()
            .take_while(|l| !l.trim_start().starts_with('['))
            .any(names_state_dir);
    Some((root, none_after))
}
