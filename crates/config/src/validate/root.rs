//! The top level of fleet.toml: `state_dir`, `max_concurrency`, `tick`, and the walk into the
//! `host` key and the `[hosts]`, `[namespaces]` and `[projects]` tables, each key checked by its own function.
//!
//! This module assembles the [`Config`]; it never checks a namespace's or project's own keys
//! (see `namespace` and `project`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::de::DeTable;

use super::checker::{Checker, Value};
use crate::model::{DEFAULT_MAX_CONCURRENCY, DEFAULT_STATE_DIR, DEFAULT_TICK};
use crate::paths::{resolve_against, resolve_dir};
use crate::{Config, DatabaseUrl, HttpListen, LogFormat, MIN_TICK};

impl Checker<'_> {
    /// The whole configuration from the parsed `root` table of the file at `path`. Always
    /// returns a `Config`; it is only meaningful when no error was recorded.
    pub(super) fn config(&mut self, root: &DeTable<'_>, path: &Path) -> Config {
        let dir = resolve_dir(path);
        self.check_keys(root, "", "");

        let state_dir = self
            .optional(root, "", "state_dir", |cx, v, key| {
                cx.state_dir(v, key, &dir)
            })
            .unwrap_or_else(|| resolve_against(&dir, DEFAULT_STATE_DIR));
        let max_concurrency = self
            .optional(root, "", "max_concurrency", Self::expect_cap)
            .unwrap_or(DEFAULT_MAX_CONCURRENCY);
        let tick = self
            .optional(root, "", "tick", Self::tick)
            .unwrap_or(DEFAULT_TICK);
        let retention = self.retention(root, "", &Default::default());
        let http_listen = self.optional(root, "", "http_listen", |cx, v, key| {
            cx.http_listen(v, key, &dir, &state_dir)
        });
        let log_format = self
            .optional(root, "", "log_format", Self::log_format)
            .unwrap_or_default();
        let database = self.optional(root, "", "database", Self::database);
        let host = self.host(root);
        let hosts = self.hosts(root);
        let (namespaces, declared) = self.namespaces(root);
        let projects = self.projects(root, &dir, &declared, &retention);

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
            http_listen,
            log_format,
            database,
            host,
            hosts,
            namespaces,
            projects,
            scheduled,
            retention,
        }
    }

    /// `state_dir`: a non-empty path, resolved against the config's folder `dir`.
    fn state_dir(&mut self, v: &Value<'_>, key: &str, dir: &Path) -> Option<PathBuf> {
        let s = self.expect_nul_free(v, key)?;
        if s.is_empty() {
            self.error(v.span(), key, "must not be empty");
            return None;
        }
        Some(resolve_against(dir, s))
    }

    /// `database`: a `postgresql://` URL (checked here, connected to only when used). The
    /// message never repeats the URL: it may hold a password.
    fn database(&mut self, v: &Value<'_>, key: &str) -> Option<DatabaseUrl> {
        let s = self.expect_nul_free(v, key)?;
        match DatabaseUrl::parse(s) {
            Ok(url) => Some(url),
            Err(why) => {
                self.error(v.span(), key, why);
                None
            }
        }
    }

    /// `http_listen`: `IP:PORT`, or a unix socket path (anything with a `/`, or anything after
    /// `unix:`, the form the daemon logs), resolved against the config's folder `dir`. A host
    /// name is refused: the address bound must be the one written, not whatever a resolver
    /// answers. A socket inside `state_dir` is refused: the daemon's own files live there (its
    /// control socket among them), and binding would replace one.
    fn http_listen(
        &mut self,
        v: &Value<'_>,
        key: &str,
        dir: &Path,
        state_dir: &Path,
    ) -> Option<HttpListen> {
        let s = self.expect_nul_free(v, key)?;
        let unix = s.strip_prefix("unix:");
        if unix.is_some() || (s.contains('/') && !s.contains("://")) {
            let written = unix.unwrap_or(s);
            if written.is_empty() {
                self.error(v.span(), key, "\"unix:\" needs a socket path after it");
                return None;
            }
            let path = resolve_against(dir, written);
            if lexical(&path).starts_with(lexical(state_dir)) {
                self.error(
                    v.span(),
                    key,
                    format!(
                        "{} is inside the state directory {}, which holds the daemon's own files: put the socket elsewhere",
                        path.display(),
                        state_dir.display()
                    ),
                );
                return None;
            }
            return Some(HttpListen::Unix(path));
        }
        if s.contains("://") {
            self.error(
                v.span(),
                key,
                format!("{s:?} is a URL: write IP:PORT (such as \"127.0.0.1:9464\") or a unix socket path"),
            );
            return None;
        }
        match s.parse::<std::net::SocketAddr>() {
            Ok(addr) => Some(HttpListen::Tcp(addr)),
            Err(_) => {
                self.error(
                    v.span(),
                    key,
                    format!(
                        "{s:?} is neither IP:PORT (such as \"127.0.0.1:9464\") nor a unix socket path (one containing '/')"
                    ),
                );
                None
            }
        }
    }

    /// `log_format`: `text` or `json`.
    fn log_format(&mut self, v: &Value<'_>, key: &str) -> Option<LogFormat> {
        let s = self.expect_str(v, key)?;
        let format = LogFormat::parse(s);
        if format.is_none() {
            self.error(
                v.span(),
                key,
                format!("expected \"text\" or \"json\", found {s:?}"),
            );
        }
        format
    }

    /// `tick`: a duration of at least [`MIN_TICK`].
    fn tick(&mut self, v: &Value<'_>, key: &str) -> Option<Duration> {
        let d = self.expect_duration(v, key, false)?;
        // EVALs follow events anyway; a tick much shorter than this only burns CPU.
        if d < MIN_TICK {
            self.error(
                v.span(),
                key,
                format!(
                    "must be at least {} (EVALs already follow every event)",
                    humantime::format_duration(MIN_TICK)
                ),
            );
            return None;
        }
        Some(d)
    }
}

/// `path` with `..` folded lexically (no file system access: the socket need not exist yet),
/// so that `a/b/../.fleet/x` is seen inside `a/.fleet`.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
