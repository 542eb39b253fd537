//! The errors a config file can yield: one [`ConfigError`] per problem, gathered into
//! [`ConfigErrors`].
//!
//! This module only shapes and displays errors; it never finds them. Their text is what
//! `fleet validate` and a refused reload show the operator, so the format is fixed:
//! `{file}:{line}: {key}: {message}`, one problem per line.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in a config file. Displays as `{file}:{line}: {key}: {message}`; the line is
/// omitted only when unknown (the file cannot be read), the key when there is none.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{}{}: {message}", .file.display(), LinePart(*.line), KeyPart(.key))]
pub struct ConfigError {
    /// The config file, as given by the caller.
    pub file: PathBuf,
    /// The 1-based line the problem is on; `None` only when the file could not be read.
    pub line: Option<usize>,
    /// The dotted key concerned (`projects.hello.timeout`, `projects.hello.command[0]`), or
    /// `(syntax)` for a syntax error on a line with no key; empty when there is none.
    pub key: String,
    /// What is wrong, for a human.
    pub message: String,
}

/// All problems found in a config file, in line order. Displays one error per line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", Lines(&.0))]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The one error of a file at `path` that could not be read: it names the file, no line.
    pub fn unreadable(path: &Path, e: &std::io::Error) -> ConfigErrors {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            line: None,
            key: String::new(),
            message: format!("cannot read file: {e}"),
        }])
    }
}

/// `:{line}`, or nothing when the line is unknown.
struct LinePart(Option<usize>);

impl fmt::Display for LinePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(line) => write!(f, ":{line}"),
            None => Ok(()),
        }
    }
}

/// `: {key}`, or nothing when there is no key.
struct KeyPart<'a>(&'a str);

impl fmt::Display for KeyPart<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, ": {}", self.0)
        }
    }
}

/// The errors one per line, with no trailing newline.
struct Lines<'a>(&'a [ConfigError]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
