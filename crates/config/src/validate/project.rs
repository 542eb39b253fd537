//! `[projects.<name>]` tables: the name and each of the project's keys, each checked by its own
//! function, in the order of [`KEYS`](crate::KEYS).
//!
//! This module never decides anything about namespaces beyond whether the one named was
//! declared; the namespace tables themselves are checked in `namespace`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::de::{DeTable, DeValue};

use super::checker::{describe, key_segment, Checker, Key, Value};
use crate::model::{
    DEFAULT_KILL_GRACE, DEFAULT_MAX_PARALLEL, DEFAULT_NAMESPACE, DEFAULT_RETRIES,
    DEFAULT_RETRY_BACKOFF, MIN_STARTING_DEADLINE,
};
use crate::paths::resolve_against;
use crate::{parse_schedule, Overlap, ProjectConfig, Retention};

/// The names a project table may refer to.
pub(super) struct Known<'a> {
    /// Every declared namespace.
    namespaces: &'a BTreeSet<String>,
    /// Every project of the file, valid or not (an invalid one is reported on its own).
    projects: &'a BTreeSet<&'a str>,
}

impl Checker<'_> {
    /// The valid `[projects.<name>]` tables of `root`, by name. `dir` is the config's folder,
    /// `declared` every declared namespace name.
    pub(super) fn projects(
        &mut self,
        root: &DeTable<'_>,
        dir: &Path,
        declared: &BTreeSet<String>,
        inherited: &Retention,
    ) -> BTreeMap<String, ProjectConfig> {
        let mut projects = BTreeMap::new();
        if let Some(table) = self.optional(root, "", "projects", Self::expect_table) {
            // Every project's name, for `on_failure`, which may name one declared later.
            let names: BTreeSet<&str> = table.iter().map(|(k, _)| k.get_ref().as_ref()).collect();
            let known = Known {
                namespaces: declared,
                projects: &names,
            };
            for (k, v) in table.iter() {
                if let Some(p) = self.project(k, v, dir, &known, inherited) {
                    projects.insert(p.name.clone(), p);
                }
            }
        }
        projects
    }

    /// One `[projects.<name>]` table: `k` is its name, `v` its value. `None` when invalid.
    fn project(
        &mut self,
        k: &Key<'_>,
        v: &Value<'_>,
        dir: &Path,
        known: &Known<'_>,
        inherited: &Retention,
    ) -> Option<ProjectConfig> {
        let declared = known.namespaces;
        let name = k.get_ref().as_ref();
        let dotted = format!("projects.{}", key_segment(name));
        self.check_name(k, &dotted, "project");
        let table = self.expect_table(v, &dotted)?;
        self.check_keys(table, "projects.<name>", &dotted);

        let command = self.required(table, k, &dotted, "command", Self::command);
        let namespace = self
            .optional(table, &dotted, "namespace", |cx, v, key| {
                cx.project_namespace(v, key, declared)
            })
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let cwd = self
            .optional(table, &dotted, "cwd", |cx, v, key| cx.cwd(v, key, dir))
            .unwrap_or_else(|| dir.to_path_buf());
        let env = self
            .optional(table, &dotted, "env", Self::env)
            .unwrap_or_default();
        let timeout = self.optional(table, &dotted, "timeout", Self::timeout);
        let kill_grace = self
            .optional(table, &dotted, "kill_grace", Self::kill_grace)
            .unwrap_or(DEFAULT_KILL_GRACE);
        let retries = self
            .optional(table, &dotted, "retries", Self::retries)
            .unwrap_or(DEFAULT_RETRIES);
        let retry_backoff = self
            .optional(table, &dotted, "retry_backoff", Self::retry_backoff)
            .unwrap_or(DEFAULT_RETRY_BACKOFF);
        let schedule = self.optional(table, &dotted, "schedule", Self::schedule);
        let timezone = self.optional(table, &dotted, "timezone", Self::timezone);
        let starting_deadline =
            self.optional(table, &dotted, "starting_deadline", Self::starting_deadline);
        let overlap = self
            .optional(table, &dotted, "overlap", Self::overlap)
            .unwrap_or(Overlap::Forbid);
        let retention = self.retention(table, &dotted, inherited);
        let on_failure = self.optional(table, &dotted, "on_failure", |cx, v, key| {
            cx.on_failure(v, key, known.projects)
        });
        let max_parallel = self
            .optional(table, &dotted, "max_parallel", Self::max_parallel)
            .unwrap_or(DEFAULT_MAX_PARALLEL);
        let accept_args = self
            .optional(table, &dotted, "accept_args", Self::expect_bool)
            .unwrap_or(false);
        let hosts = self.optional(table, &dotted, "hosts", Self::project_hosts);

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
            retention,
            on_failure,
            max_parallel,
            accept_args,
            hosts,
        })
    }

    /// `on_failure`: the name of a declared project (this one included: a hook's own failure
    /// never reports to a hook, so a project reporting to itself makes one extra run at most).
    fn on_failure(
        &mut self,
        v: &Value<'_>,
        key: &str,
        projects: &BTreeSet<&str>,
    ) -> Option<String> {
        let name = self.expect_str(v, key)?;
        if !projects.contains(name) {
            self.error(
                v.span(),
                key,
                format!(
                    "unknown project {name:?}: a failure hook must name a project of this file"
                ),
            );
            return None;
        }
        Some(name.to_string())
    }

    /// `command`: a non-empty array of strings (argv) whose first item, the program, is
    /// non-empty. Every bad item is reported, under `key[i]`.
    fn command(&mut self, v: &Value<'_>, key: &str) -> Option<Vec<String>> {
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

    /// `namespace`: the name of a namespace in `declared`.
    fn project_namespace(
        &mut self,
        v: &Value<'_>,
        key: &str,
        declared: &BTreeSet<String>,
    ) -> Option<String> {
        let ns = self.expect_str(v, key)?;
        if !declared.contains(ns) {
            let known: Vec<&str> = declared.iter().map(String::as_str).collect();
            self.error(
                v.span(),
                key,
                format!("unknown namespace {ns:?}; declared: {}", known.join(", ")),
            );
            return None;
        }
        Some(ns.to_string())
    }

    /// `cwd`: a non-empty path, resolved against the config's folder `dir`. Not required to
    /// exist: a missing cwd fails the run at spawn time, not the config.
    fn cwd(&mut self, v: &Value<'_>, key: &str, dir: &Path) -> Option<PathBuf> {
        let s = self.expect_nul_free(v, key)?;
        if s.is_empty() {
            self.error(v.span(), key, "must not be empty (use \".\")");
            return None;
        }
        Some(resolve_against(dir, s))
    }

    /// `env`: a table of strings. Each bad variable is reported and left out; the others are
    /// kept, so that one typo does not hide the rest of the table's problems.
    fn env(&mut self, v: &Value<'_>, key: &str) -> Option<BTreeMap<String, String>> {
        let table = self.expect_table(v, key)?;
        let mut env = BTreeMap::new();
        for (ek, ev) in table.iter() {
            if let Some(val) = self.env_var(ek, ev, key) {
                env.insert(ek.get_ref().to_string(), val);
            }
        }
        Some(env)
    }

    /// One variable of `env`: `k` its name, `v` its value, `env_key` the table's dotted key.
    fn env_var(&mut self, k: &Key<'_>, v: &Value<'_>, env_key: &str) -> Option<String> {
        let var = k.get_ref().as_ref();
        let var_key = format!("{env_key}.{}", key_segment(var));
        if var.is_empty() || var.contains('=') || var.contains('\0') {
            self.error(
                k.span(),
                &var_key,
                "invalid environment variable name (empty, or contains '=' or NUL)",
            );
            return None;
        }
        // fleet sets these for every run; a project's own value would be silently overridden
        // (or, for FAILPOINTS, dropped), so it is refused instead.
        if var.starts_with("FLEET_") || var == "FAILPOINTS" {
            self.error(
                k.span(),
                &var_key,
                "reserved: fleet sets FLEET_* (and strips FAILPOINTS) for every run",
            );
            return None;
        }
        self.expect_nul_free(v, &var_key).map(str::to_string)
    }

    /// `timeout`: a duration greater than zero (absent means no limit).
    fn timeout(&mut self, v: &Value<'_>, key: &str) -> Option<Duration> {
        self.expect_duration(v, key, false)
    }

    /// `kill_grace`: a duration; zero means SIGKILL right after SIGTERM.
    fn kill_grace(&mut self, v: &Value<'_>, key: &str) -> Option<Duration> {
        self.expect_duration(v, key, true)
    }

    /// `retries`: a count from 0 to `u32::MAX`.
    fn retries(&mut self, v: &Value<'_>, key: &str) -> Option<u32> {
        self.expect_u32(v, key, 0)
    }

    /// `retry_backoff`: a duration, may be zero.
    fn retry_backoff(&mut self, v: &Value<'_>, key: &str) -> Option<Duration> {
        self.expect_duration(v, key, true)
    }

    /// `schedule`: a cron expression [`parse_schedule`] accepts, kept as written.
    fn schedule(&mut self, v: &Value<'_>, key: &str) -> Option<String> {
        let s = self.expect_str(v, key)?;
        if let Err(e) = parse_schedule(s) {
            self.error(v.span(), key, format!("invalid cron expression {s:?}: {e}"));
            return None;
        }
        Some(s.to_string())
    }

    /// `timezone`: an IANA time zone name, kept as written.
    fn timezone(&mut self, v: &Value<'_>, key: &str) -> Option<String> {
        let s = self.expect_str(v, key)?;
        if s.parse::<chrono_tz::Tz>().is_err() {
            self.error(
                v.span(),
                key,
                format!("unknown time zone {s:?}; expected an IANA name such as \"UTC\" or \"Europe/Paris\""),
            );
            return None;
        }
        Some(s.to_string())
    }

    /// `starting_deadline`: a duration of at least [`MIN_STARTING_DEADLINE`] (absent means no
    /// limit). A running daemon sees an occurrence some milliseconds after its instant, so a
    /// shorter deadline would skip every occurrence as missed, not only those the daemon was
    /// down for.
    fn starting_deadline(&mut self, v: &Value<'_>, key: &str) -> Option<Duration> {
        let d = self.expect_duration(v, key, true)?;
        if d < MIN_STARTING_DEADLINE {
            self.error(
                v.span(),
                key,
                format!(
                    "{:?} is under {}: a running daemon sees an occurrence a few milliseconds \
                     after its instant, so every occurrence would be skipped as missed; \
                     \"1s\" starts only those caught on time",
                    humantime::format_duration(d).to_string(),
                    humantime::format_duration(MIN_STARTING_DEADLINE)
                ),
            );
            return None;
        }
        Some(d)
    }

    /// `max_parallel`: an integer from 1 to [`MAX_CAP`](crate::MAX_CAP) (0 would never
    /// start the project; a float or a string is refused too).
    fn max_parallel(&mut self, v: &Value<'_>, key: &str) -> Option<u32> {
        self.expect_int(v, key, 1, i128::from(crate::MAX_CAP))
            .and_then(|n| u32::try_from(n).ok())
    }

    /// `overlap`: one of `forbid`, `queue`, `replace`.
    fn overlap(&mut self, v: &Value<'_>, key: &str) -> Option<Overlap> {
        let s = self.expect_str(v, key)?;
        let overlap = [Overlap::Forbid, Overlap::Queue, Overlap::Replace]
            .into_iter()
            .find(|o| o.as_str() == s);
        if overlap.is_none() {
            self.error(
                v.span(),
                key,
                format!("invalid value {s:?}; expected one of forbid, queue, replace"),
            );
        }
        overlap
    }
}
