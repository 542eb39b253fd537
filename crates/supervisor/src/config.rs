//! `fleet.toml`: reading, validating and resolving the configuration.
//!
//! The file is parsed with `toml`'s span-preserving document parser and validated by hand, so
//! that every problem names the file, the 1-based line and the dotted key, and so that *all*
//! problems are reported together (a TOML syntax error alone stops parsing). Every accepted key
//! is listed in [`KEYS`]; the unknown-key check is derived from it, and a test keeps it in step
//! with docs/CONFIG.md.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

#[cfg(test)]
mod tests;

/// The namespace of a project that names none. Always known, even when not declared; when
/// undeclared it is capped by the global cap alone.
/// The shortest `tick` accepted: the tick is only a backstop, and a shorter one makes an idle
/// daemon spin.
pub const MIN_TICK: Duration = Duration::from_millis(100);

pub const DEFAULT_NAMESPACE: &str = "default";

/// Shown as the default of a key that must be given.
pub const REQUIRED: &str = "required";
/// Shown as the default of an optional key whose absence means "not set".
pub const UNSET: &str = "none";

/// The register of every key fleet.toml accepts: (dotted key pattern, default as documented).
///
/// `<name>` stands for a namespace or project name. The unknown-key check is derived from this
/// list, and a test asserts that docs/CONFIG.md documents exactly these keys with these defaults.
pub const KEYS: &[(&str, &str)] = &[
    ("state_dir", ".fleet"),
    ("max_concurrency", "4"),
    ("tick", "1s"),
    ("namespaces.<name>.max_concurrency", REQUIRED),
    ("namespaces.<name>.weight", "1"),
    ("projects.<name>.command", REQUIRED),
    ("projects.<name>.namespace", DEFAULT_NAMESPACE),
    ("projects.<name>.cwd", "."),
    ("projects.<name>.env", "{}"),
    ("projects.<name>.timeout", UNSET),
    ("projects.<name>.kill_grace", "10s"),
    ("projects.<name>.retries", "0"),
    ("projects.<name>.retry_backoff", "10s"),
    ("projects.<name>.schedule", UNSET),
    ("projects.<name>.timezone", "UTC"),
    ("projects.<name>.starting_deadline", UNSET),
    ("projects.<name>.overlap", "forbid"),
];

const DEFAULT_STATE_DIR: &str = ".fleet";
const DEFAULT_MAX_CONCURRENCY: usize = 4;
const DEFAULT_TICK: Duration = Duration::from_secs(1);
const DEFAULT_WEIGHT: u32 = 1;
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);
const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(10);

/// The whole configuration, validated and with every path made absolute.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file it came from, as given.
    pub path: PathBuf,
    /// The folder of that file, absolute (canonicalized when it exists).
    pub dir: PathBuf,
    /// Absolute: the `state_dir` key (default `.fleet`) resolved against `dir`.
    pub state_dir: PathBuf,
    /// Global cap on active runs; at least 1.
    pub max_concurrency: usize,
    /// Backstop EVAL interval; greater than zero.
    pub tick: Duration,
    /// The `[namespaces.<name>]` tables, by name.
    pub namespaces: BTreeMap<String, NamespaceConfig>,
    /// The `[projects.<name>]` tables, by name.
    pub projects: BTreeMap<String, ProjectConfig>,
    /// The names of the projects that have a `schedule`, in name order: derived from
    /// `projects` at load, so that an EVAL (every tick) does not walk every project to find
    /// the few scheduled ones.
    pub scheduled: Vec<String>,
}

/// One `[namespaces.<name>]` table.
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceConfig {
    /// At least 1.
    pub max_concurrency: usize,
    /// Share of the global cap when it binds; at least 1, default 1.
    pub weight: u32,
}

/// One `[projects.<name>]` table.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectConfig {
    pub name: String,
    /// argv: non-empty, argv[0] non-empty.
    pub command: Vec<String>,
    /// [`DEFAULT_NAMESPACE`] when omitted.
    pub namespace: String,
    /// Absolute: the `cwd` key resolved against [`Config::dir`] (default: `Config::dir`). Not
    /// required to exist: a missing cwd fails the run at spawn time, not the config.
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    pub timeout: Option<Duration>,
    pub kill_grace: Duration,
    pub retries: u32,
    /// Base of the exponential backoff between retries.
    pub retry_backoff: Duration,
    /// A validated cron expression: 5 fields, or 6 with seconds first. See [`parse_schedule`].
    pub schedule: Option<String>,
    /// A validated IANA time zone name; `None` means UTC.
    pub timezone: Option<String>,
    pub starting_deadline: Option<Duration>,
    pub overlap: Overlap,
}

/// What a schedule occurrence does while a run of the project is active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// Skip the occurrence.
    Forbid,
    /// Queue a run behind the active one.
    Queue,
    /// Cancel the active run and start the new one.
    Replace,
}

impl Overlap {
    /// The spelling used in fleet.toml.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Forbid => "forbid",
            Overlap::Queue => "queue",
            Overlap::Replace => "replace",
        }
    }
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem in a config file. Displays as `{file}:{line}: {key}: {message}`; the line is
/// omitted only when unknown (the file cannot be read), the key when there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// All problems found in a config file, in line order. Displays one error per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
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

impl std::error::Error for ConfigErrors {}

impl Config {
    /// Reads and parses the file at `path`. An unreadable or missing file is one error naming it.
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
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigErrors> {
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

    /// The caps the packer enforces: the global cap and each declared namespace's.
    pub fn caps(&self) -> packer::Caps {
        packer::Caps {
            global: self.max_concurrency,
            namespaces: self
                .namespaces
                .iter()
                .map(|(name, ns)| {
                    (
                        name.clone(),
                        packer::NamespaceCap {
                            max_concurrency: ns.max_concurrency,
                            weight: ns.weight,
                        },
                    )
                })
                .collect(),
        }
    }

    /// The project called `name`, if declared.
    pub fn project(&self, name: &str) -> Option<&ProjectConfig> {
        self.projects.get(name)
    }

    /// The state directory a config file names, found even when the rest of the file is
    /// invalid — so that `fleet status` can show a refused edit, and `fleet runs` keeps working,
    /// while the operator fixes a typo. `None` when the file cannot be read, or its `state_dir`
    /// itself cannot be made out.
    pub fn state_dir_of(path: &Path) -> Option<PathBuf> {
        let text = std::fs::read_to_string(path).ok()?;
        let dir = resolve_dir(path);
        let Ok(root) = DeTable::parse(&text) else {
            // Unparsable elsewhere: a top-level `state_dir = "..."` line (before any table) can
            // still be read on its own; a file with no such line uses the default.
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
                found = Some(resolve_against(&dir, inner));
            }
            return Some(found.unwrap_or_else(|| resolve_against(&dir, DEFAULT_STATE_DIR)));
        };
        match root.get_ref().get("state_dir") {
            None => Some(resolve_against(&dir, DEFAULT_STATE_DIR)),
            Some(v) => match v.get_ref() {
                toml::de::DeValue::String(s) if !s.is_empty() && !s.contains('\0') => {
                    Some(resolve_against(&dir, s))
                }
                _ => None,
            },
        }
    }
}

/// Parses a cron expression the way fleet.toml accepts it: 5 fields (minute hour day-of-month
/// month day-of-week), or 6 with seconds first. Day-of-month and day-of-week combine with OR,
/// as in classic cron. The schedules code should parse through this too, so that what
/// `fleet validate` accepts is exactly what fires.
pub fn parse_schedule(expr: &str) -> Result<croner::Cron, String> {
    let fields = expr.split_whitespace().count();
    if fields != 5 && fields != 6 {
        return Err(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, found {fields}"
        ));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| e.to_string())
}

/// Whether `name` is an acceptable namespace or project name: non-empty, `[A-Za-z0-9_.-]`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The folder of `path`, absolute: canonicalized when it exists, else made absolute against the
/// current directory.
fn resolve_dir(path: &Path) -> PathBuf {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if let Ok(canon) = std::fs::canonicalize(&parent) {
        return canon;
    }
    match std::path::absolute(&parent) {
        Ok(abs) => abs.components().collect(),
        Err(_) => parent,
    }
}

/// `rel` resolved against the absolute `base`, with `.` components removed.
fn resolve_against(base: &Path, rel: &str) -> PathBuf {
    base.join(rel).components().collect()
}

/// A dotted-key segment as the user would write it: bare when possible, else quoted.
fn key_segment(name: &str) -> String {
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

type Entry<'t, 'i> = (
    &'t Spanned<std::borrow::Cow<'i, str>>,
    &'t Spanned<DeValue<'i>>,
);

fn lookup<'t, 'i>(table: &'t DeTable<'i>, key: &str) -> Option<Entry<'t, 'i>> {
    table.iter().find(|(k, _)| k.get_ref().as_ref() == key)
}

/// The keys allowed directly in a table whose dotted pattern is `prefix` ("" for the top level).
fn allowed_keys(prefix: &str) -> Vec<&'static str> {
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

/// Collects errors while walking the parsed document.
struct Checker<'a> {
    file: &'a Path,
    text: &'a str,
    /// Byte offset at which each line starts (line 1 at index 0).
    line_starts: Vec<usize>,
    errors: Vec<ConfigError>,
}

impl<'a> Checker<'a> {
    fn new(text: &'a str, file: &'a Path) -> Self {
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

    fn error(&mut self, span: Range<usize>, key: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.to_path_buf(),
            line: Some(self.line_of(span.start)),
            key: key.to_string(),
            message: message.into(),
        });
    }

    fn finish(mut self) -> ConfigErrors {
        self.errors.sort_by_key(|e| e.line);
        ConfigErrors(self.errors)
    }

    fn syntax_error(&mut self, e: &toml::de::Error) {
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
    fn check_keys(&mut self, table: &DeTable<'_>, pattern: &str, dotted: &str) {
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

    fn expect_table<'t, 'i>(
        &mut self,
        v: &'t Spanned<DeValue<'i>>,
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

    fn expect_str<'t>(&mut self, v: &'t Spanned<DeValue<'_>>, key: &str) -> Option<&'t str> {
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

    /// An integer in `min..=max`.
    fn expect_int(
        &mut self,
        v: &Spanned<DeValue<'_>>,
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

    fn expect_duration(
        &mut self,
        v: &Spanned<DeValue<'_>>,
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
            Err(e) => {
                self.error(v.span(), key, format!("invalid duration {s:?}: {e}"));
                None
            }
        }
    }

    /// A cap: an integer of at least 1 that fits `usize`.
    fn expect_cap(&mut self, v: &Spanned<DeValue<'_>>, key: &str) -> Option<usize> {
        let max = i128::try_from(usize::MAX).unwrap_or(i128::MAX);
        self.expect_int(v, key, 1, max)
            .and_then(|n| usize::try_from(n).ok())
    }

    fn config(&mut self, root: &DeTable<'_>, path: &Path) -> Config {
        let dir = resolve_dir(path);
        self.check_keys(root, "", "");

        let mut state_dir = resolve_against(&dir, DEFAULT_STATE_DIR);
        if let Some((_, v)) = lookup(root, "state_dir") {
            if let Some(s) = self.expect_str(v, "state_dir") {
                if s.is_empty() {
                    self.error(v.span(), "state_dir", "must not be empty");
                } else if s.contains('\0') {
                    self.error(v.span(), "state_dir", "must not contain a NUL byte");
                } else {
                    state_dir = resolve_against(&dir, s);
                }
            }
        }
        let max_concurrency = lookup(root, "max_concurrency")
            .and_then(|(_, v)| self.expect_cap(v, "max_concurrency"))
            .unwrap_or(DEFAULT_MAX_CONCURRENCY);
        let tick = lookup(root, "tick")
            .and_then(|(_, v)| {
                let d = self.expect_duration(v, "tick", false)?;
                // EVALs follow events anyway; a tick much shorter than this only burns CPU.
                if d < MIN_TICK {
                    self.error(
                        v.span(),
                        "tick",
                        format!(
                            "must be at least {} (EVALs already follow every event)",
                            humantime::format_duration(MIN_TICK)
                        ),
                    );
                    return None;
                }
                Some(d)
            })
            .unwrap_or(DEFAULT_TICK);

        let mut namespaces = BTreeMap::new();
        // Every declared namespace name, valid or not, so that a bad namespace table does not
        // also make each project in it an "unknown namespace".
        let mut declared: BTreeSet<String> = BTreeSet::new();
        declared.insert(DEFAULT_NAMESPACE.to_string());
        if let Some((_, v)) = lookup(root, "namespaces") {
            if let Some(table) = self.expect_table(v, "namespaces") {
                for (k, v) in table.iter() {
                    let name = k.get_ref().as_ref();
                    declared.insert(name.to_string());
                    if let Some(ns) = self.namespace(k, v) {
                        namespaces.insert(name.to_string(), ns);
                    }
                }
            }
        }

        let mut projects = BTreeMap::new();
        if let Some((_, v)) = lookup(root, "projects") {
            if let Some(table) = self.expect_table(v, "projects") {
                for (k, v) in table.iter() {
                    if let Some(p) = self.project(k, v, &dir, &declared) {
                        projects.insert(p.name.clone(), p);
                    }
                }
            }
        }

        let scheduled = projects
            .values()
            .filter(|p| p.schedule.is_some())
            .map(|p| p.name.clone())
            .collect();
        Config {
            path: path.to_path_buf(),
            dir,
            state_dir,
            max_concurrency,
            tick,
            namespaces,
            projects,
            scheduled,
        }
    }

    fn check_name(&mut self, k: &Spanned<std::borrow::Cow<'_, str>>, dotted: &str, what: &str) {
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

    fn namespace(
        &mut self,
        k: &Spanned<std::borrow::Cow<'_, str>>,
        v: &Spanned<DeValue<'_>>,
    ) -> Option<NamespaceConfig> {
        let name = k.get_ref().as_ref();
        let dotted = format!("namespaces.{}", key_segment(name));
        self.check_name(k, &dotted, "namespace");
        let table = self.expect_table(v, &dotted)?;
        self.check_keys(table, "namespaces.<name>", &dotted);

        let key = format!("{dotted}.max_concurrency");
        let max_concurrency = match lookup(table, "max_concurrency") {
            Some((_, v)) => self.expect_cap(v, &key),
            None => {
                self.error(k.span(), &key, "missing required key");
                None
            }
        };
        let key = format!("{dotted}.weight");
        let weight = match lookup(table, "weight") {
            Some((_, v)) => self
                .expect_int(v, &key, 1, i128::from(u32::MAX))
                .and_then(|n| u32::try_from(n).ok()),
            None => Some(DEFAULT_WEIGHT),
        };
        Some(NamespaceConfig {
            max_concurrency: max_concurrency?,
            weight: weight?,
        })
    }

    fn project(
        &mut self,
        k: &Spanned<std::borrow::Cow<'_, str>>,
        v: &Spanned<DeValue<'_>>,
        dir: &Path,
        namespaces: &BTreeSet<String>,
    ) -> Option<ProjectConfig> {
        let name = k.get_ref().as_ref();
        let dotted = format!("projects.{}", key_segment(name));
        self.check_name(k, &dotted, "project");
        let table = self.expect_table(v, &dotted)?;
        self.check_keys(table, "projects.<name>", &dotted);
        let key = |field: &str| format!("{dotted}.{field}");

        let command = match lookup(table, "command") {
            Some((_, v)) => self.command(v, &key("command")),
            None => {
                self.error(k.span(), &key("command"), "missing required key");
                None
            }
        };

        let mut namespace = DEFAULT_NAMESPACE.to_string();
        if let Some((_, v)) = lookup(table, "namespace") {
            let key = key("namespace");
            if let Some(ns) = self.expect_str(v, &key) {
                if namespaces.contains(ns) {
                    namespace = ns.to_string();
                } else {
                    let known: Vec<&str> = namespaces.iter().map(String::as_str).collect();
                    self.error(
                        v.span(),
                        &key,
                        format!("unknown namespace {ns:?}; declared: {}", known.join(", ")),
                    );
                }
            }
        }

        let mut cwd = dir.to_path_buf();
        if let Some((_, v)) = lookup(table, "cwd") {
            let key = key("cwd");
            if let Some(s) = self.expect_str(v, &key) {
                if s.is_empty() {
                    self.error(v.span(), &key, "must not be empty (use \".\")");
                } else if s.contains('\0') {
                    self.error(v.span(), &key, "must not contain a NUL byte");
                } else {
                    cwd = resolve_against(dir, s);
                }
            }
        }

        let mut env = BTreeMap::new();
        if let Some((_, v)) = lookup(table, "env") {
            let env_key = key("env");
            if let Some(t) = self.expect_table(v, &env_key) {
                for (ek, ev) in t.iter() {
                    let var = ek.get_ref().as_ref();
                    let var_key = format!("{env_key}.{}", key_segment(var));
                    if var.is_empty() || var.contains('=') || var.contains('\0') {
                        self.error(
                            ek.span(),
                            &var_key,
                            "invalid environment variable name (empty, or contains '=' or NUL)",
                        );
                        continue;
                    }
                    // fleet sets these for every run; a project's own value would be silently
                    // overridden (or, for FAILPOINTS, dropped), so it is refused instead.
                    if var.starts_with("FLEET_") || var == "FAILPOINTS" {
                        self.error(
                            ek.span(),
                            &var_key,
                            "reserved: fleet sets FLEET_* (and strips FAILPOINTS) for every run",
                        );
                        continue;
                    }
                    if let Some(val) = self.expect_str(ev, &var_key) {
                        if val.contains('\0') {
                            self.error(ev.span(), &var_key, "must not contain a NUL byte");
                        } else {
                            env.insert(var.to_string(), val.to_string());
                        }
                    }
                }
            }
        }

        let timeout = lookup(table, "timeout")
            .and_then(|(_, v)| self.expect_duration(v, &key("timeout"), false));
        let kill_grace = lookup(table, "kill_grace")
            .and_then(|(_, v)| self.expect_duration(v, &key("kill_grace"), true))
            .unwrap_or(DEFAULT_KILL_GRACE);
        let retries = lookup(table, "retries")
            .and_then(|(_, v)| self.expect_int(v, &key("retries"), 0, i128::from(u32::MAX)))
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0);
        let retry_backoff = lookup(table, "retry_backoff")
            .and_then(|(_, v)| self.expect_duration(v, &key("retry_backoff"), true))
            .unwrap_or(DEFAULT_RETRY_BACKOFF);

        let mut schedule = None;
        if let Some((_, v)) = lookup(table, "schedule") {
            let key = key("schedule");
            if let Some(s) = self.expect_str(v, &key) {
                match parse_schedule(s) {
                    Ok(_) => schedule = Some(s.to_string()),
                    Err(e) => self.error(
                        v.span(),
                        &key,
                        format!("invalid cron expression {s:?}: {e}"),
                    ),
                }
            }
        }

        let mut timezone = None;
        if let Some((_, v)) = lookup(table, "timezone") {
            let key = key("timezone");
            if let Some(s) = self.expect_str(v, &key) {
                match s.parse::<chrono_tz::Tz>() {
                    Ok(_) => timezone = Some(s.to_string()),
                    Err(_) => self.error(
                        v.span(),
                        &key,
                        format!("unknown time zone {s:?}; expected an IANA name such as \"UTC\" or \"Europe/Paris\""),
                    ),
                }
            }
        }

        let starting_deadline = lookup(table, "starting_deadline")
            .and_then(|(_, v)| self.expect_duration(v, &key("starting_deadline"), true));

        let mut overlap = Overlap::Forbid;
        if let Some((_, v)) = lookup(table, "overlap") {
            let key = key("overlap");
            if let Some(s) = self.expect_str(v, &key) {
                match s {
                    "forbid" => overlap = Overlap::Forbid,
                    "queue" => overlap = Overlap::Queue,
                    "replace" => overlap = Overlap::Replace,
                    _ => self.error(
                        v.span(),
                        &key,
                        format!("invalid value {s:?}; expected one of forbid, queue, replace"),
                    ),
                }
            }
        }

        Some(ProjectConfig {
            name: name.to_string(),
            command: command?,
            namespace,
            cwd,
            env,
            timeout,
            kill_grace,
            retries,
            retry_backoff,
            schedule,
            timezone,
            starting_deadline,
            overlap,
        })
    }

    fn command(&mut self, v: &Spanned<DeValue<'_>>, key: &str) -> Option<Vec<String>> {
        let DeValue::Array(items) = v.get_ref() else {
            let hint = if v.get_ref().is_str() {
                " (write the argv as an array, e.g. [\"sh\", \"-c\", \"...\"])"
            } else {
                ""
            };
            self.error(
                v.span(),
                key,
                format!(
                    "expected an array of strings, found {}{hint}",
                    describe(v.get_ref())
                ),
            );
            return None;
        };
        if items.is_empty() {
            self.error(v.span(), key, "must not be empty");
            return None;
        }
        let mut argv = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let item_key = format!("{key}[{i}]");
            match item.get_ref() {
                DeValue::String(s) if s.contains('\0') => {
                    self.error(item.span(), &item_key, "must not contain a NUL byte");
                    ok = false;
                }
                DeValue::String(s) if i == 0 && s.is_empty() => {
                    self.error(item.span(), &item_key, "program name must not be empty");
                    ok = false;
                }
                DeValue::String(s) => argv.push(s.to_string()),
                other => {
                    self.error(
                        item.span(),
                        &item_key,
                        format!("expected a string, found {}", describe(other)),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(argv)
    }
}

fn join(prefix: &str, segment: &str) -> String {
    if prefix.is_empty() {
        segment.to_string()
    } else {
        format!("{prefix}.{segment}")
    }
}

/// "integer 4", "string \"4\"", "array", ...: what was found, for type errors.
fn describe(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("string {:?}", s.as_ref()),
        DeValue::Integer(i) => format!("integer {i}"),
        DeValue::Float(f) => format!("float {f}"),
        DeValue::Boolean(b) => format!("boolean {b}"),
        other => other.type_str().to_string(),
    }
}
