//! The [`Checker`] core of validation: mapping spans to lines, reporting syntax errors,
//! refusing unknown keys (derived from [`KEYS`]) and the typed expectations every key builds on
//! (table, string, integer in a range, duration, cap). The keys themselves are checked in the
//! other files of `validate/`.

use std::borrow::Cow;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::{valid_name, ConfigError, ConfigErrors, KEYS};

/// A key of a parsed table, with its span.
pub(super) type Key<'i> = Spanned<Cow<'i, str>>;
/// A value of a parsed table, with its span.
pub(super) type Value<'i> = Spanned<DeValue<'i>>;

/// The entry of `table` named `key`, if any.
pub(super) fn lookup<'t, 'i>(
    table: &'t DeTable<'i>,
    key: &str,
) -> Option<(&'t Key<'i>, &'t Value<'i>)> {
    table.iter().find(|(k, _)| k.get_ref().as_ref() == key)
}

/// The keys allowed directly in a table whose dotted pattern is `prefix` ("" for the top level).
pub(crate) fn allowed_keys(prefix: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for (pattern, _) in KEYS {
        let rest = if prefix.is_empty() {
            Some(*pattern)
        } else {
            pattern
                .strip_prefix(prefix)
                .and_then(|r| r.strip_prefix('.'))
        };
        if let Some(rest) = rest {
            let first = rest.split('.').next().unwrap_or(rest);
            if !out.contains(&first) {
                out.push(first);
            }
        }
    }
    out
}

/// A dotted-key segment as the user would write it: bare when possible, else quoted.
pub(super) fn key_segment(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}

/// The dotted key of `segment` inside the table `prefix` ("" for the top level).
pub(super) fn join(prefix: &str, segment: &str) -> String {
    if prefix.is_empty() {
        segment.to_string()
    } else {
        format!("{prefix}.{segment}")
    }
}

/// "integer 4", "string \"4\"", "array", ...: what was found, for type errors.
pub(super) fn describe(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("string {:?}", s.as_ref()),
        DeValue::Integer(i) => format!("integer {i}"),
        DeValue::Float(f) => format!("float {f}"),
        DeValue::Boolean(b) => format!("boolean {b}"),
        other => other.type_str().to_string(),
    }
}

/// Collects errors while walking the parsed document.
pub(super) struct Checker<'a> {
    file: &'a Path,
    text: &'a str,
    /// Byte offset at which each line starts (line 1 at index 0).
    line_starts: Vec<usize>,
    pub(super) errors: Vec<ConfigError>,
}

impl<'a> Checker<'a> {
    pub(super) fn new(text: &'a str, file: &'a Path) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Checker {
            file,
            text,
            line_starts,
            errors: Vec::new(),
        }
    }

    /// The 1-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.line_starts
            .partition_point(|&start| start <= offset)
            .max(1)
    }

    /// Records a problem with `key` at the line where `span` starts.
    pub(super) fn error(&mut self, span: Range<usize>, key: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.to_path_buf(),
            line: Some(self.line_of(span.start)),
            key: key.to_string(),
            message: message.into(),
        });
    }

    /// Every problem recorded, in line order (problems on one line keep the order found).
    pub(super) fn finish(mut self) -> ConfigErrors {
        self.errors.sort_by_key(|e| e.line);
        ConfigErrors(self.errors)
    }

    pub(super) fn syntax_error(&mut self, e: &toml::de::Error) {
        let line = e.span().map(|s| self.line_of(s.start));
        let key = line
            .and_then(|l| self.syntax_key(l))
            .unwrap_or_else(|| "(syntax)".to_string());
        let message = e.message().trim().to_string();
        self.errors.push(ConfigError {
            file: self.file.to_path_buf(),
            line,
            key,
            message: format!("invalid TOML: {message}"),
        });
    }

    /// Best guess at the dotted key a syntax error on `line` concerns: the table header in force
    /// plus the key on that line. `None` when the line holds neither a header nor a key.
    fn syntax_key(&self, line: usize) -> Option<String> {
        fn plausible(s: &str) -> bool {
            !s.is_empty()
                && s.chars().all(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | '\'' | ' ')
                })
        }
        fn header(line: &str) -> Option<String> {
            let inner = line.trim().strip_prefix('[')?;
            let inner = inner.strip_prefix('[').unwrap_or(inner);
            let inner = inner.split(']').next().unwrap_or(inner);
            let key: String = inner
                .split('.')
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(".");
            plausible(&key).then_some(key)
        }
        let lines: Vec<&str> = self.text.split('\n').collect();
        let this = *lines.get(line.checked_sub(1)?)?;
        if let Some(h) = header(this) {
            return Some(h);
        }
        let key = this.split('=').next().filter(|_| this.contains('='))?;
        let key: String = key.split('.').map(str::trim).collect::<Vec<_>>().join(".");
        if !plausible(&key) {
            return None;
        }
        let table = lines[..line - 1].iter().rev().find_map(|l| header(l));
        Some(match table {
            Some(t) => format!("{t}.{key}"),
            None => key,
        })
    }

    /// Reports every key of `table` not allowed under `pattern`; `dotted` is the table's
    /// actual dotted key, used in messages.
    pub(super) fn check_keys(&mut self, table: &DeTable<'_>, pattern: &str, dotted: &str) {
        let allowed = allowed_keys(pattern);
        for (k, _) in table.iter() {
            let name = k.get_ref().as_ref();
            if !allowed.contains(&name) {
                let key = join(dotted, &key_segment(name));
                self.error(
                    k.span(),
                    &key,
                    format!("unknown key; expected one of {}", allowed.join(", ")),
                );
            }
        }
    }

    /// Reports a namespace or project name that is not a [`valid_name`]; `what` says which.
    pub(super) fn check_name(&mut self, k: &Key<'_>, dotted: &str, what: &str) {
        let name = k.get_ref().as_ref();
        if !valid_name(name) {
            let message = if name.is_empty() {
                format!("{what} name must not be empty")
            } else {
                format!("invalid {what} name {name:?}: use only letters, digits, '_', '.' and '-'")
            };
            self.error(k.span(), dotted, message);
        }
    }

    /// Checks the optional key `name` of `table` (whose dotted key is `dotted`) with `check`,
    /// which gets the value and the key's dotted name. `None` when the key is absent or invalid.
    pub(super) fn optional<'t, 'i, T>(
        &mut self,
        table: &'t DeTable<'i>,
        dotted: &str,
        name: &str,
        check: impl FnOnce(&mut Self, &'t Value<'i>, &str) -> Option<T>,
    ) -> Option<T> {
        let (_, v) = lookup(table, name)?;
        check(self, v, &join(dotted, name))
    }

    /// As [`Checker::optional`], for a key that must be given: its absence is reported at
    /// `table_key`, the key of the table that lacks it.
    pub(super) fn required<'t, 'i, T>(
        &mut self,
        table: &'t DeTable<'i>,
        table_key: &Key<'_>,
        dotted: &str,
        name: &str,
        check: impl FnOnce(&mut Self, &'t Value<'i>, &str) -> Option<T>,
    ) -> Option<T> {
        let key = join(dotted, name);
        match lookup(table, name) {
            Some((_, v)) => check(self, v, &key),
            None => {
                self.error(table_key.span(), &key, "missing required key");
                None
            }
        }
    }

    pub(super) fn expect_table<'t, 'i>(
        &mut self,
        v: &'t Value<'i>,
        key: &str,
    ) -> Option<&'t DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.error(
                    v.span(),
                    key,
                    format!("expected a table, found {}", describe(other)),
                );
                None
            }
        }
    }

    pub(super) fn expect_str<'t>(&mut self, v: &'t Value<'_>, key: &str) -> Option<&'t str> {
        match v.get_ref() {
            DeValue::String(s) => Some(s.as_ref()),
            other => {
                self.error(
                    v.span(),
                    key,
                    format!("expected a string, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// A boolean (`true` or `false`, unquoted).
    pub(super) fn expect_bool(&mut self, v: &Value<'_>, key: &str) -> Option<bool> {
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.error(
                    v.span(),
                    key,
                    format!("expected true or false, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// A string usable as a path or environment value: one containing a NUL byte is refused.
    pub(super) fn expect_nul_free<'t>(&mut self, v: &'t Value<'_>, key: &str) -> Option<&'t str> {
        let s = self.expect_str(v, key)?;
        if s.contains('\0') {
            self.error(v.span(), key, "must not contain a NUL byte");
            return None;
        }
        Some(s)
    }

    /// An integer in `min..=max`.
    pub(super) fn expect_int(
        &mut self,
        v: &Value<'_>,
        key: &str,
        min: i128,
        max: i128,
    ) -> Option<i128> {
        let n = match v.get_ref() {
            DeValue::Integer(i) => {
                let digits: String = i.as_str().chars().filter(|&c| c != '_').collect();
                match i128::from_str_radix(&digits, i.radix()) {
                    Ok(n) => n,
                    Err(_) => {
                        self.error(v.span(), key, format!("integer {i} is out of range"));
                        return None;
                    }
                }
            }
            other => {
                self.error(
                    v.span(),
                    key,
                    format!("expected an integer, found {}", describe(other)),
                );
                return None;
            }
        };
        if n < min {
            let what = if min == 0 {
                "must not be negative".to_string()
            } else {
                format!("must be at least {min}")
            };
            self.error(v.span(), key, format!("{what}, found {n}"));
            None
        } else if n > max {
            self.error(v.span(), key, format!("must be at most {max}, found {n}"));
            None
        } else {
            Some(n)
        }
    }

    /// An integer in `min..=u32::MAX`.
    pub(super) fn expect_u32(&mut self, v: &Value<'_>, key: &str, min: u32) -> Option<u32> {
        self.expect_int(v, key, i128::from(min), i128::from(u32::MAX))
            .and_then(|n| u32::try_from(n).ok())
    }

    /// A duration string such as `"10s"`; zero is refused unless `allow_zero`.
    pub(super) fn expect_duration(
        &mut self,
        v: &Value<'_>,
        key: &str,
        allow_zero: bool,
    ) -> Option<Duration> {
        let s = match v.get_ref() {
            DeValue::String(s) => s.as_ref(),
            other => {
                self.error(
                    v.span(),
                    key,
                    format!(
                        "expected a duration string such as \"10s\" or \"5m\", found {}",
                        describe(other)
                    ),
                );
                return None;
            }
        };
        match humantime::parse_duration(s) {
            Ok(d) if d.is_zero() && !allow_zero => {
                self.error(
                    v.span(),
                    key,
                    format!("duration {s:?} must be greater than zero"),
                );
                None
            }
            Ok(d) => Some(d),
            Err(_) if s.trim_start().starts_with('-') => {
                self.error(
                    v.span(),
                    key,
                    format!("invalid duration {s:?}: a duration cannot be negative"),
                );
                None
            }
            Err(e) => {
                self.error(v.span(), key, format!("invalid duration {s:?}: {e}"));
                None
            }
        }
    }

    /// A cap: an integer from 1 to [`MAX_CAP`](crate::MAX_CAP).
    pub(super) fn expect_cap(&mut self, v: &Value<'_>, key: &str) -> Option<usize> {
        self.expect_int(v, key, 1, i128::from(crate::MAX_CAP))
            .and_then(|n| usize::try_from(n).ok())
    }
}
