//! What `fleet status` reports, built once as JSON (`fleet status --json`, fields in
//! docs/REFERENCE.md) and written as text for a person from that same value: the daemon, the
//! config in force and its errors, occupancy against every cap, the schedules whose clock went
//! back or that are overdue, the pauses.

use std::collections::BTreeMap;
use std::path::Path;

use config::{Config, ConfigErrors};
use fleet_http::runs_json::time_json as time;
use serde_json::{json, Value};
use store::{rfc3339, DaemonRow, Run, ScheduleRow};
use supervisor::statedir::StateDir;

use super::liveness::Liveness;

/// What is active, for `fleet status`'s occupancy: the active runs (every host's) and this
/// host's name, whose own cap counts the runs it claimed.
pub struct Active<'a> {
    /// Every active run (`starting` or `running`), on any host.
    pub runs: &'a [Run],
    /// This host's name (see [`Status::with_host`]), `None` when unknown.
    pub this_host: Option<&'a str>,
}

/// What `fleet status` reports.
pub struct Status {
    value: Value,
}

impl Status {
    /// Builds the report: the daemon (alive if it holds the lock), its epoch and uptime, the
    /// config in force and its last reload error, occupancy against every cap (this host's
    /// included when it has one).
    pub fn new(
        config: Option<&Config>,
        file_errors: Option<&ConfigErrors>,
        state: &StateDir,
        path: &Path,
        holder: Option<i32>,
        row: Option<DaemonRow>,
        active: Active<'_>,
    ) -> Status {
        let Active {
            runs: active,
            this_host,
        } = active;
        let now = store::now_ms();
        let mut by_ns: BTreeMap<&str, u64> = BTreeMap::new();
        for r in active {
            *by_ns.entry(r.namespace.as_str()).or_default() += 1;
        }
        // The caps in force: the daemon's, when one runs; otherwise the file's.
        let caps: Value = match (&holder, &row) {
            (Some(_), Some(row)) => serde_json::from_str(&row.caps_json).unwrap_or(Value::Null),
            _ => config.map_or(Value::Null, |c| {
                serde_json::from_str(&supervisor::caps::caps_json(c)).unwrap_or(Value::Null)
            }),
        };
        let mut namespaces = serde_json::Map::new();
        if let Some(map) = caps.get("namespaces").and_then(|v| v.as_object()) {
            for (name, cap) in map {
                namespaces.insert(
                    name.clone(),
                    json!({
                        "active": by_ns.get(name.as_str()).copied().unwrap_or(0),
                        "max_concurrency": cap.get("max_concurrency"),
                        "weight": cap.get("weight"),
                    }),
                );
            }
        }
        for (name, n) in &by_ns {
            namespaces
                .entry(name.to_string())
                .or_insert_with(|| json!({"active": n, "max_concurrency": null, "weight": null}));
        }
        // The row belongs to the lock holder only once it has taken over; until then (a moment
        // after start) the row still describes the previous daemon and must not be mixed in.
        let row = row.filter(|r| holder.is_none_or(|pid| pid == r.pid));
        let daemon = match (&holder, &row) {
            (Some(pid), Some(row)) => json!({
                "running": true,
                "pid": pid,
                "epoch": row.epoch,
                "started_at": rfc3339(row.started_at),
                // Unknown, not zero, when the clock went back since the daemon started.
                "uptime_seconds": (!config::clock::ahead_of_clock(row.started_at, now))
                    .then(|| (now - row.started_at).max(0) / 1000),
                "config": row.config_path,
                "last_reload_error": row.reload_error,
                // Moves at every reload the daemon processed (applied or refused): scripts wait
                // on it to know an edit was seen.
                "config_checked_at": rfc3339(row.updated_at),
            }),
            (Some(pid), None) => json!({"running": true, "pid": pid, "taking_over": true}),
            (None, row) => json!({
                "running": false,
                "pid": null,
                "epoch": row.as_ref().map(|r| r.epoch),
                // False when no daemon has ever run with this state directory (its database
                // records none): after an edit of `state_dir`, a daemon started before it
                // still runs on its old one.
                "ever_ran_here": row.is_some(),
            }),
        };
        // This host's own capacity (`[hosts.<name>]`), when it has one: the runs active on it
        // against it. On a shared database `global` counts every host's runs; this counts the
        // ones claimed by this host. The running daemon's caps name its host; with none
        // running, the file's table for `this_host` (the name this state directory last ran
        // as, which `fleet daemon --host` may have set) is the cap.
        let host_cap: Option<(String, Value)> = match (&holder, &row) {
            (Some(_), Some(_)) => caps.get("host").and_then(|h| {
                let name = h.get("name").and_then(Value::as_str)?.to_string();
                Some((name, h.get("max_concurrency")?.clone()))
            }),
            _ => config
                .zip(this_host)
                .map(|(c, name)| (name.to_string(), json!(c.host_capacity(name)))),
        };
        let host_cap = host_cap
            .filter(|(_, cap)| !cap.is_null())
            .map(|(name, cap)| {
                let on_host = active
                    .iter()
                    .filter(|r| r.host.as_deref() == Some(name.as_str()))
                    .count();
                json!({"name": name, "active": on_host, "max_concurrency": cap})
            });
        Status {
            value: json!({
                "daemon": daemon,
                "config": path.display().to_string(),
                "config_errors": file_errors.map(|e| e.0.iter().map(|e| e.to_string()).collect::<Vec<_>>()),
                "state_dir": state.root().display().to_string(),
                "global": {"active": active.len(), "max_concurrency": caps.get("global")},
                "namespaces": namespaces,
                "host_capacity": host_cap,
            }),
        }
    }

    /// Adds the schedules (`schedules` in the JSON: one object per scheduled project's cursor),
    /// and flags those whose cursor is later than the clock (the clock went back, and until a
    /// daemon resumes them they fire nothing) and those overdue (`config`, the config in force
    /// if it reads, tells a schedule from the leftover row of one removed since).
    pub fn with_schedules(mut self, rows: &[ScheduleRow], config: Option<&Config>) -> Status {
        let now = store::now_ms();
        // Only a project the config schedules can be overdue: the row of one whose schedule
        // was removed stays, with its last `next`, and means nothing. Without a config that
        // reads, nothing is called overdue.
        let scheduled = |project: &str| {
            config.is_some_and(|c| {
                c.projects
                    .get(project)
                    .is_some_and(|p| p.schedule.is_some())
            })
        };
        let list: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "project": r.project,
                    "timetable": r.timetable,
                    "last_handled": rfc3339(r.cursor),
                    "next": time(r.next_fire),
                    "skipped_total": r.skipped_total,
                    "ahead_of_clock": config::clock::ahead_of_clock(r.cursor, now),
                    "overdue": scheduled(&r.project)
                        && r.next_fire.is_some_and(|next| now - next > OVERDUE_AFTER_MS),
                    "clock_went_back": r.clock_back.map(|c| json!({
                        "seen_at": rfc3339(c.seen_at),
                        "last_handled_was": rfc3339(c.cursor_was),
                    })),
                })
            })
            .collect();
        self.value["schedules"] = Value::Array(list);
        self
    }

    /// Adds the verdict on the daemon: `daemon.state` (`running`, `stuck`, `stopped`) and
    /// `daemon.reason` (why stuck; null otherwise).
    pub fn with_liveness(mut self, liveness: &Liveness) -> Status {
        let (state, reason) = liveness.fields();
        self.value["daemon"]["state"] = state;
        self.value["daemon"]["reason"] = reason;
        self
    }

    /// Adds this host's name (`host`), the published config's version
    /// (`published_config_version`, null when nothing is published) and whether the local
    /// fleet.toml (`local`, its bytes) differs from it (`local_config_differs`), compared as
    /// every host compares them: by [`config::published_digest`], so a file that
    /// differs by its `database` password alone does not differ.
    pub fn with_host(
        mut self,
        host: Option<&str>,
        published: Option<&store::Published>,
        local: Option<Vec<u8>>,
    ) -> Status {
        self.value["host"] = json!(host);
        self.value["published_config_version"] = json!(published.map(|p| p.version));
        self.value["local_config_differs"] = json!(published.zip(local).map(|(p, l)| {
            use config::published_digest;
            published_digest(&l) != published_digest(p.text.as_bytes())
        }));
        self
    }

    /// Adds how far this machine's clock is ahead of the shared database's (`clock_offset_s`,
    /// negative when behind; null on SQLite, whose clock is the local one) and whether that is
    /// past the bound the hosts are told of (`clock_skewed`). Measured by this command, on the
    /// machine the daemon runs on: the daemon's clock.
    pub fn with_clock(mut self, offset_ms: Option<store::Millis>) -> Status {
        self.value["clock_offset_s"] = json!(offset_ms.map(|ms| ms as f64 / 1000.0));
        self.value["clock_skewed"] = json!(offset_ms.map(store::db_clock::skewed));
        self
    }

    /// Adds the pauses in force (`paused` in the JSON: `kind`, `name`, `since`, `by` each).
    pub fn with_pauses(mut self, pauses: &store::Pauses) -> Status {
        self.value["paused"] = Value::Array(
            pauses
                .0
                .iter()
                .map(|p| {
                    json!({
                        "kind": p.kind.as_str(),
                        "name": p.name,
                        "since": rfc3339(p.since),
                        "by": p.by,
                    })
                })
                .collect(),
        );
        self
    }

    /// As JSON.
    pub fn json(&self) -> String {
        self.value.to_string()
    }

    /// As text for a person.
    pub fn text(&self) -> String {
        let v = &self.value;
        let d = &v["daemon"];
        let mut s = String::new();
        if d["taking_over"].as_bool() == Some(true) {
            s += &format!(
                "daemon: starting, pid {} (taking over the state directory)\n",
                d["pid"]
            );
        } else if d["running"].as_bool() == Some(true) {
            let up = match d["uptime_seconds"].as_i64() {
                Some(n) => format!("{n}s"),
                None => "? (the clock went back since it started)".into(),
            };
            // A daemon that holds the state directory but does not turn is not "running".
            let state = if d["state"] == "stuck" {
                "stuck"
            } else {
                "running"
            };
            s += &format!(
                "daemon: {state}, pid {}, epoch {}, up {up}\nconfig: {}\n",
                d["pid"],
                d["epoch"],
                d["config"].as_str().unwrap_or("?")
            );
            if let Some(err) = d["last_reload_error"].as_str() {
                s += &format!(
                    "last reload refused (the previous config stays in force):\n  {}\n",
                    err.replace('\n', "\n  ")
                );
            }
        } else if d["ever_ran_here"].as_bool() == Some(false) {
            // Said, since "not running" alone after an edit of `state_dir` reads as "the
            // daemon is down" and invites a second one beside it.
            s += "daemon: not running here: no daemon has run with this state directory yet \
                  (one started before `state_dir` was edited keeps its own until it restarts)\n";
        } else {
            s += "daemon: not running\n";
        }
        if let Some(reason) = d["reason"].as_str() {
            s += &format!("daemon is STUCK: {reason}\n");
        }
        if let Some(errors) = v["config_errors"].as_array() {
            s += "the config file is invalid now:\n";
            for e in errors {
                s += &format!("  {}\n", e.as_str().unwrap_or("?"));
            }
        }
        s += &format!("state dir: {}\n", v["state_dir"].as_str().unwrap_or("?"));
        if let Some(host) = v["host"].as_str() {
            s += &format!("host: {host}\n");
        }
        if let Some(version) = v["published_config_version"].as_i64() {
            s += &format!("published config: version {version}\n");
        }
        if v["local_config_differs"].as_bool() == Some(true) {
            s += "this host's fleet.toml differs from the published config (the published one is in force)\n";
        }
        if let Some(offset) = v["clock_offset_s"].as_f64() {
            let ms = (offset * 1000.0).round() as store::Millis;
            if store::db_clock::skewed(ms) {
                s += &format!(
                    "clock: {}: time is judged by the database's clock, but this host's log lines are off by as much\n",
                    store::db_clock::skew_words(ms)
                );
            } else {
                // Rounded first: an offset under 50 ms reads `+0.0`, never `-0.0`.
                let tenths = (offset * 10.0).round() / 10.0 + 0.0;
                s += &format!("clock: {tenths:+.1} s from the database's\n");
            }
        }
        s += &schedule_warnings(v);
        for p in v["paused"].as_array().into_iter().flatten() {
            let by = p["by"]
                .as_str()
                .map(|b| format!(", by {b}"))
                .unwrap_or_default();
            s += &format!(
                "paused: {} {} (since {}{by}); `fleet resume` releases it\n",
                p["kind"].as_str().unwrap_or("?"),
                p["name"].as_str().unwrap_or("?"),
                p["since"].as_str().unwrap_or("?"),
            );
        }
        let cap = &v["global"]["max_concurrency"];
        s += &format!(
            "active: {} of {} (global cap)\n",
            v["global"]["active"],
            if cap.is_null() {
                "?".to_string()
            } else {
                cap.to_string()
            }
        );
        if let Some(map) = v["namespaces"].as_object() {
            for (name, n) in map {
                let cap = if n["max_concurrency"].is_null() {
                    "-".to_string()
                } else {
                    n["max_concurrency"].to_string()
                };
                s += &format!("  namespace {name}: {} of {cap}\n", n["active"]);
            }
        }
        let h = &v["host_capacity"];
        if !h.is_null() {
            s += &format!(
                "  host {}: {} of {} (this host's own cap)\n",
                h["name"].as_str().unwrap_or("?"),
                h["active"],
                h["max_concurrency"]
            );
        }
        s
    }
}

/// How long past its time an occurrence may stay unhandled before `fleet status` calls its
/// schedule overdue, in milliseconds: twice the longest wait between two tries of a schedule
/// the database refuses; a working daemon handles an occurrence within milliseconds of its time.
const OVERDUE_AFTER_MS: i64 = 2 * supervisor::schedule::FIRE_BACKOFF_MAX_MS;

/// One line for each schedule the clock went back on: whose cursor is later than the clock now,
/// or that a daemon resumed after finding it so; and, while a daemon runs, one for each schedule
/// whose next occurrence stays unhandled well past its time (the database refuses its runs, say:
/// the daemon's log names the project and the error).
fn schedule_warnings(v: &Value) -> String {
    let mut s = String::new();
    let running = v["daemon"]["state"] == "running";
    for sch in v["schedules"].as_array().into_iter().flatten() {
        let project = sch["project"].as_str().unwrap_or("?");
        let last = sch["last_handled"].as_str().unwrap_or("?");
        if running && sch["overdue"].as_bool() == Some(true) {
            s += &format!(
                "schedule {project}: overdue: its occurrence of {} is still unhandled; the \
                 daemon's log says why (`project={project}`)\n",
                sch["next"].as_str().unwrap_or("?")
            );
        }
        if sch["ahead_of_clock"].as_bool() == Some(true) {
            s += &format!(
                "schedule {project}: the clock went back: its last occurrence handled ({last}) is \
                 later than now; a daemon resumes it from the clock\n"
            );
        } else if let Some(c) = sch["clock_went_back"].as_object() {
            s += &format!(
                "schedule {project}: the clock went back: at {} its last occurrence handled was {}; \
                 resumed from the clock\n",
                c["seen_at"].as_str().unwrap_or("?"),
                c["last_handled_was"].as_str().unwrap_or("?")
            );
        }
    }
    s
}
