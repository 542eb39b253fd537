//! The validated configuration: its types, its defaults, the register of accepted keys, and the
//! value rules (names, cron expressions) that both validation and the rest of fleet share.
//!
//! Everything here is plain data and pure functions: this module never reads a file and never
//! reports errors with positions; reading is `load`'s job and position-aware validation is
//! `validate`'s.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The largest cap accepted (`max_concurrency` at the top level, of a namespace or of a host,
/// and a project's `max_parallel`): a million runs active at once is beyond any machine's
/// process table, and a bigger number only costs. On PostgreSQL a cap is held as seat rows,
/// and the claim's transaction must be able to count them; earlier versions took numbers up to
/// `usize::MAX` and cut them to 32 bits, so that a cap of 2^32 silently became 0.
pub const MAX_CAP: u32 = 1_000_000;

/// The shortest `tick` accepted: the tick is only a backstop, and a shorter one makes an idle
/// daemon spin.
pub const MIN_TICK: Duration = Duration::from_millis(100);

/// The shortest `starting_deadline` accepted. A running daemon fires an occurrence on the EVAL
/// that follows its instant, some milliseconds late; a deadline shorter than that lag would
/// skip every occurrence as missed, not only those the daemon was down for.
pub const MIN_STARTING_DEADLINE: Duration = Duration::from_secs(1);

/// The namespace of a project that names none. Always known, even when not declared; when
/// undeclared it is capped by the global cap alone.
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
    ("http_listen", UNSET),
    ("log_format", "text"),
    ("database", UNSET),
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
    ("keep_runs", "100"),
    ("keep_for", "30d"),
    ("max_log_size", "64MiB"),
    ("projects.<name>.keep_runs", INHERITED),
    ("projects.<name>.keep_for", INHERITED),
    ("projects.<name>.max_log_size", INHERITED),
    ("projects.<name>.on_failure", UNSET),
    ("projects.<name>.max_parallel", "1"),
    ("projects.<name>.accept_args", "false"),
    ("host", super::host::MACHINE_HOSTNAME),
    ("hosts.<name>.max_concurrency", REQUIRED),
    ("projects.<name>.hosts", super::host::ANY_HOST),
];

/// Shown as the default of a project key whose absence means "the top-level key's value".
pub const INHERITED: &str = "top level";

// The defaults of the optional keys; each must agree with its entry in `KEYS`.
pub(super) const DEFAULT_STATE_DIR: &str = ".fleet";
pub(super) const DEFAULT_MAX_CONCURRENCY: usize = 4;
pub(super) const DEFAULT_TICK: Duration = Duration::from_secs(1);
pub(super) const DEFAULT_WEIGHT: u32 = 1;
pub(super) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);
pub(super) const DEFAULT_RETRIES: u32 = 0;
pub(super) const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(10);
pub(super) const DEFAULT_MAX_PARALLEL: u32 = 1;

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
    /// Backstop EVAL interval; at least [`MIN_TICK`].
    pub tick: Duration,
    /// Where the daemon serves `/metrics`, `/healthz`, `/api/` and the dashboard; `None`: no
    /// HTTP listener. Read at start only (a change needs a restart).
    pub http_listen: Option<HttpListen>,
    /// The `[namespaces.<name>]` tables, by name.
    pub namespaces: BTreeMap<String, NamespaceConfig>,
    /// The `[projects.<name>]` tables, by name.
    pub projects: BTreeMap<String, ProjectConfig>,
    /// How the daemon writes its log lines (`fleet daemon --log-format` overrides it).
    pub log_format: LogFormat,
    /// The `database` key: a PostgreSQL database for the queue and the history; `None`: SQLite
    /// in the state directory.
    pub database: Option<super::DatabaseUrl>,
    /// The name of the host this config is read on: the `host` key, else the machine's
    /// hostname; always a [`valid_host_name`](super::valid_host_name). `fleet daemon --host`
    /// overrides it ([`Config::for_host`]).
    pub host: String,
    /// The `[hosts.<name>]` tables, by name: each declared host's own capacity.
    pub hosts: BTreeMap<String, super::HostConfig>,
    /// The names of the projects that have a `schedule`, in name order: derived from
    /// `projects` at load, so that an EVAL (every tick) does not walk every project to find
    /// the few scheduled ones.
    pub scheduled: Vec<String>,
    /// The top-level `keep_runs`, `keep_for` and `max_log_size` (what a project without its
    /// own keys keeps).
    pub retention: crate::Retention,
}

impl Config {
    /// The caps the packer enforces on [`Config::host`]: the global cap, each declared
    /// namespace's, the `max_parallel` of each project that sets one above 1, the host's own
    /// capacity (`[hosts.<host>]`) and the projects placed only on other hosts.
    pub fn caps(&self) -> packer::Caps {
        packer::Caps {
            host: packer::HostRules {
                name: self.host.clone(),
                max_concurrency: self.host_capacity(&self.host),
                placed_elsewhere: self
                    .projects
                    .values()
                    .filter(|p| !p.placed_on(&self.host))
                    .map(|p| p.name.clone())
                    .collect(),
            },
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
            max_parallel: self
                .projects
                .values()
                .filter(|p| p.max_parallel != DEFAULT_MAX_PARALLEL)
                .map(|p| (p.name.clone(), p.max_parallel as usize))
                .collect(),
        }
    }

    /// The failure hooks in force, by the name of the project that reports to each, with the
    /// hook project's namespace.
    pub fn failure_hooks(&self) -> store::FailureHooks {
        self.projects
            .values()
            .filter_map(|p| {
                let hook = self.projects.get(p.on_failure.as_deref()?)?;
                Some((
                    p.name.clone(),
                    store::FailureHook {
                        project: hook.name.clone(),
                        namespace: hook.namespace.clone(),
                    },
                ))
            })
            .collect()
    }

    /// How many runs of `project` may be active at once: its `max_parallel`, or 1 for a
    /// project the config does not declare.
    pub fn max_parallel(&self, project: &str) -> u32 {
        self.projects
            .get(project)
            .map_or(DEFAULT_MAX_PARALLEL, |p| p.max_parallel)
    }

    /// The config as read on the host `name` (a valid host name: `fleet daemon --host`):
    /// everything as it is, but [`Config::host`].
    pub fn for_host(mut self, name: String) -> Config {
        self.host = name;
        self
    }

    /// The capacity of the host `name`: its `[hosts.<name>] max_concurrency`; `None` when no
    /// table declares it (the host has no cap of its own: the global and namespace caps alone
    /// hold it).
    pub fn host_capacity(&self, name: &str) -> Option<usize> {
        self.hosts.get(name).map(|h| h.max_concurrency)
    }

    /// The host names projects are placed on that no `[hosts.<name>]` table declares, each
    /// once, in name order (`fleet validate` warns about them: a typo there pins a project to
    /// a host that never comes).
    pub fn undeclared_hosts(&self) -> BTreeSet<&str> {
        self.projects
            .values()
            .filter_map(|p| p.hosts.as_ref())
            .flatten()
            .map(String::as_str)
            .filter(|h| !self.hosts.contains_key(*h))
            .collect()
    }

    /// The project called `name`, if declared.
    pub fn project(&self, name: &str) -> Option<&ProjectConfig> {
        self.projects.get(name)
    }
}

/// The `http_listen` key: a TCP address, or a unix socket path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpListen {
    /// `IP:PORT` (`127.0.0.1:9464`, `[::1]:9464`); port 0 picks a free port.
    Tcp(std::net::SocketAddr),
    /// A path containing `/` (absolute: resolved against fleet.toml's folder): a unix stream
    /// socket, created at start (a leftover file there is replaced) with mode 0600.
    Unix(PathBuf),
}

impl fmt::Display for HttpListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpListen::Tcp(a) => write!(f, "http://{a}"),
            HttpListen::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// One `[namespaces.<name>]` table.
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceConfig {
    /// Cap on the namespace's active runs; at least 1.
    pub max_concurrency: usize,
    /// Share of the global cap when it binds; at least 1, default 1.
    pub weight: u32,
}

/// One `[projects.<name>]` table.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectConfig {
    /// The project's name: the `<name>` of its table; satisfies [`valid_name`].
    pub name: String,
    /// The argv: non-empty, and `argv[0]`, the program, non-empty.
    pub command: Vec<String>,
    /// [`DEFAULT_NAMESPACE`] when omitted.
    pub namespace: String,
    /// Absolute: the `cwd` key resolved against [`Config::dir`] (default: `Config::dir`). Not
    /// required to exist: a missing cwd fails the run at spawn time, not the config.
    pub cwd: PathBuf,
    /// Extra environment variables for each run, on top of the daemon's own; never a
    /// `FLEET_*` name or `FAILPOINTS`, which fleet sets or strips for every run.
    pub env: BTreeMap<String, String>,
    /// The longest a run may take before it is stopped as `timed_out`; greater than zero.
    /// `None` means no limit.
    pub timeout: Option<Duration>,
    /// The time between SIGTERM and SIGKILL when a run is stopped (timeout or cancel); may be
    /// zero.
    pub kill_grace: Duration,
    /// Extra attempts after a run ends `failed`, `timed_out` or `lost`; 0 means none.
    pub retries: u32,
    /// Base of the exponential backoff between retries.
    pub retry_backoff: Duration,
    /// A validated cron expression: 5 fields, or 6 with seconds first, or a macro. See
    /// [`parse_schedule`](crate::parse_schedule).
    pub schedule: Option<String>,
    /// A validated IANA time zone name; `None` means UTC.
    pub timezone: Option<String>,
    /// How late a missed schedule occurrence may still start, at least
    /// [`MIN_STARTING_DEADLINE`]; `None` means no limit.
    pub starting_deadline: Option<Duration>,
    /// What an occurrence does while a run of the project is active.
    pub overlap: Overlap,
    /// The history and log this project keeps: its own keys, else the top level's.
    pub retention: crate::Retention,
    /// The project whose run is queued when a run of this one ends `failed`, `timed_out` or
    /// `lost` with no retry left: a declared project (maybe this one). `None`: no hook.
    pub on_failure: Option<String>,
    /// How many runs of the project may be active at once; at least 1, default 1. The database
    /// enforces it (each active run holds one of the project's seats).
    pub max_parallel: u32,
    /// Whether a run may be given its own arguments (appended to `command`) and environment
    /// variables (`fleet enqueue P --env K=V -- ARG…`); refused when false, the default.
    pub accept_args: bool,
    /// The hosts the project's runs may start on (`hosts = ["a", "b"]`); `None`: any host.
    /// Never empty; each a valid host name, declared under `[hosts]` or not.
    pub hosts: Option<BTreeSet<String>>,
}

impl ProjectConfig {
    /// Whether the project's runs may start on the host `host`: it has no `hosts` list, or the
    /// list names it.
    pub fn placed_on(&self, host: &str) -> bool {
        self.hosts.as_ref().is_none_or(|h| h.contains(host))
    }
}

/// How the daemon writes its log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One line of text per event, for people (and, under systemd, for the journal).
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

impl LogFormat {
    /// The spelling used in fleet.toml and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }

    /// Parses [`LogFormat::as_str`]'s spelling; `None` for anything else.
    pub fn parse(s: &str) -> Option<LogFormat> {
        match s {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
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

/// Whether `name` is an acceptable namespace or project name: non-empty, `[A-Za-z0-9_.-]`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}
