//! `fleet hosts [--json]` and `fleet hosts forget NAME [--force]`: the hosts sharing the
//! database, and the operator's statement that one of them is gone.
//!
//! It owns the one refusal the store leaves to the caller: forgetting a host whose heartbeat
//! is younger than the silence threshold (a heartbeat seconds ago proves the host alive;
//! silence proves nothing, so only the operator may decide). It must never end runs itself:
//! the store's `forget_host` does, in one transaction.

use serde_json::{json, Value};
use store::{now_ms, HostRow, HostState, Millis, Run, SILENCE_MS};
use supervisor::retry::RetryPolicy;

use crate::console;
use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};

/// What `fleet hosts` was asked.
#[derive(clap::Args, Debug)]
pub struct HostsArgs {
    /// One JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// `forget NAME`: the host is gone.
    #[command(subcommand)]
    pub action: Option<HostsAction>,
}

/// What `fleet hosts` may do besides listing.
#[derive(Debug, clap::Subcommand)]
pub enum HostsAction {
    /// State that host NAME is gone: its epoch is bumped (its daemon can write nothing more),
    /// its active runs end `lost` (retried per policy) and their seats are freed, in one
    /// transaction. Refused while its heartbeat is younger than 10 s, unless --force.
    Forget {
        /// The host, as `fleet hosts` names it.
        name: String,
        /// Forget it even though its heartbeat is recent (it is alive).
        #[arg(long)]
        force: bool,
    },
}

/// `fleet hosts`: the list, or `forget`.
pub fn hosts(ctx: &Ctx, args: &HostsArgs) -> Result<()> {
    match &args.action {
        None => list(ctx, args.json),
        Some(HostsAction::Forget { name, force }) => forget(ctx, name, *force),
    }
}

/// `fleet hosts`: one line per host (or with `json` one JSON array): name, state, epoch,
/// heartbeat age, its clock against the database's, fleet version, config version (and whether
/// its local file differs from the published one), active runs, HTTP address. Ages are by the
/// database's clock (the command follows it), so a host's skew changes none of them.
///
/// Errors: exit 2 for an invalid config that does not say where the state directory is (an
/// invalid one that does is a warning); 1 when the database cannot be read.
fn list(ctx: &Ctx, json: bool) -> Result<()> {
    let state = ctx.state(IfInvalid::Warn)?;
    let (hosts, published) = match ctx::open_existing(&state)? {
        Some(store) => (
            store.hosts().map_err(Failure::action)?,
            store.published_config().map_err(Failure::action)?,
        ),
        None => (Vec::new(), None),
    };
    let now = now_ms();
    // Each heartbeat carries the digest of its host's file as it would be published (the
    // `database` password masked): compared with the published text's, taken the same way.
    let published = published
        .as_ref()
        .map(|p| config::published_digest(p.text.as_bytes()));
    // SQLite: one host, which heartbeats not (its daemon lock says whether it runs).
    let holder = match state.database() {
        None => Some(state.daemon_holder().ok().flatten()),
        Some(_) => None,
    };
    let list: Vec<Value> = hosts
        .iter()
        .map(|h| {
            let mut v = row(h, published.as_deref(), now);
            if let Some(holder) = holder {
                if h.forgotten_at.is_none() {
                    let alive = holder == Some(h.pid);
                    v["state"] = json!(if alive { "alive" } else { "silent" });
                }
            }
            v
        })
        .collect();
    if json {
        console::println(Value::Array(list))
    } else {
        console::println(text(&list))
    }
}

/// One host as JSON (snake_case fields, times RFC 3339 UTC, ages in seconds); `published` is
/// the digest of the published config's text, if one is published.
fn row(h: &HostRow, published: Option<&str>, now: Millis) -> Value {
    let differs = match (published, &h.config_digest) {
        (Some(p), Some(d)) => Some(d != p),
        _ => None,
    };
    json!({
        "name": h.name,
        "state": h.state(now).as_str(),
        "epoch": h.epoch,
        "pid": h.pid,
        "started_at": store::rfc3339(h.started_at),
        "heartbeat_at": store::rfc3339(h.heartbeat_at),
        "heartbeat_age_s": ((now - h.heartbeat_at).max(0) as f64) / 1000.0,
        "version": h.version,
        "config_version": h.config_version,
        "config_differs": differs,
        "active_runs": h.active_runs,
        "http_addr": h.http_addr,
        "forgotten_at": h.forgotten_at.map(store::rfc3339),
        "forgotten_by": h.forgotten_by,
        "clock_offset_s": h.clock_offset_ms.map(|ms| ms as f64 / 1000.0),
        "clock_skewed": h.clock_offset_ms.map(store::db_clock::skewed),
        "machine": h.place.as_ref().map(|p| p.machine.as_str()),
        "stopped_at": h.stopped_at.map(store::rfc3339),
    })
}

/// The table `fleet hosts` prints.
fn text(list: &[Value]) -> String {
    if list.is_empty() {
        return "no hosts (no daemon has taken over this database yet)".into();
    }
    let mut lines = vec![format!(
        "{:<20} {:<9} {:>7} {:>10} {:>9} {:<9} {:<16} {:>6}  {}",
        "HOST", "STATE", "EPOCH", "HEARTBEAT", "CLOCK", "VERSION", "CONFIG", "ACTIVE", "HTTP"
    )];
    for h in list {
        let config = match (h["config_version"].as_i64(), h["config_differs"].as_bool()) {
            (Some(v), Some(true)) => format!("v{v} (differs)"),
            (Some(v), _) => format!("v{v}"),
            (None, Some(true)) => "differs".to_string(),
            (None, _) => "-".to_string(),
        };
        // Its clock against the database's, marked `!` past the bound.
        let clock = match h["clock_offset_s"].as_f64() {
            Some(s) if h["clock_skewed"].as_bool() == Some(true) => format!("{s:+.1}s!"),
            Some(s) => format!("{s:+.1}s"),
            None => "-".to_string(),
        };
        lines.push(format!(
            "{:<20} {:<9} {:>7} {:>9.0}s {:>9} {:<9} {:<16} {:>6}  {}",
            h["name"].as_str().unwrap_or(""),
            h["state"].as_str().unwrap_or(""),
            // As text: a JSON value's Display ignores width and alignment.
            h["epoch"].to_string(),
            h["heartbeat_age_s"].as_f64().unwrap_or(0.0),
            clock,
            h["version"].as_str().unwrap_or(""),
            config,
            h["active_runs"].to_string(),
            h["http_addr"].as_str().unwrap_or("-"),
        ));
    }
    lines.join("\n")
}

/// `fleet hosts forget NAME`: bumps the host's epoch, ends its active runs `lost` (each retried
/// per its project's retry policy in the config), frees their seats — one transaction — and
/// prints what it did. Refuses a host whose heartbeat is younger than [`SILENCE_MS`] unless
/// `force`. A host already forgotten (and not back since): says when and by whom, writes
/// nothing, exit 0.
///
/// Errors: exit 2 for an invalid config, an unknown host, or a SQLite state directory (one
/// host, nothing to forget); 1 when refused (alive) or the database fails.
fn forget(ctx: &Ctx, name: &str, force: bool) -> Result<()> {
    let config = ctx.config()?;
    let state = ctx.state(IfInvalid::Refuse)?;
    if state.database().is_none() {
        return Err(Failure::input(
            "hosts forget is for hosts sharing a PostgreSQL database; on SQLite the state directory is one host's (stop its daemon instead)",
        ));
    }
    let Some(store) = ctx::open_existing_to_write(&state)? else {
        return Err(Failure::input(format!(
            "no host named {name:?} is known to the database"
        )));
    };
    let hosts = store.hosts().map_err(Failure::action)?;
    let Some(host) = hosts.iter().find(|h| h.name == name) else {
        return Err(Failure::input(format!(
            "no host named {name:?} is known to the database"
        )));
    };
    let now = now_ms();
    // By the database's clock (this command follows it), as the heartbeat was written.
    if host.state(now) == HostState::Alive && !force {
        return Err(Failure::action(format!(
            "host {name} is alive (its heartbeat is {:.1}s old by the database's clock, under {}s): not forgetting it; silence proves nothing, but a heartbeat this recent proves it runs (--force to forget it anyway)",
            (now - host.heartbeat_at) as f64 / 1000.0,
            SILENCE_MS / 1000
        )));
    }
    // On a shared database the config in force is the published one: its retry policy and
    // failure hooks decide what the forgotten runs become, not this host's local file (which
    // may differ). The local file only when nothing is published yet.
    let config = match store.published_config().map_err(Failure::action)? {
        Some(p) => config::Config::published_here(&p.text, ctx.path(), config).map_err(|e| {
            Failure::action(format!(
                "the published config (version {}) cannot be used here: {e}",
                p.version
            ))
        })?,
        None => config.clone(),
    };
    let plan = |run: &Run| {
        RetryPolicy::for_project(&config, &run.project).next(
            store::RunStatus::Lost,
            run.attempt,
            now,
        )
    };
    let by = format!("fleet hosts forget (pid {})", std::process::id());
    let done = match store.forget_host(name, &by, &plan, &config.failure_hooks(), now) {
        Ok(done) => done,
        // Forgotten already: the operator's intent holds; nothing more is written (exit 0).
        Err(e @ store::StoreError::AlreadyForgotten { .. }) => return console::println(e),
        Err(e @ store::StoreError::UnknownHost(_)) => return Err(Failure::input(e)),
        Err(e) => return Err(Failure::action(e)),
    };
    let ids = |v: &[i64]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
        }
    };
    console::println(format!(
        "forgot host {name}: its epoch is now {}; runs lost: {}; retries queued: {}",
        done.epoch,
        ids(&done.lost),
        ids(&done.retried)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every column of a row starts where its header does (numbers right-aligned under theirs).
    #[test]
    fn the_table_lines_up() {
        let host = json!({
            "name": "vm", "state": "alive", "epoch": 1, "heartbeat_age_s": 1.0,
            "clock_offset_s": -45.2, "clock_skewed": true,
            "version": "0.1.0", "config_version": null, "config_differs": null,
            "active_runs": 0, "http_addr": null,
        });
        let table = text(&[host]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2, "{table}");
        // Fixed-width columns: the last one (HTTP) starts at the same place in both lines.
        assert_eq!(
            lines[0].len() - "HTTP".len(),
            lines[1].len() - "-".len(),
            "{table}"
        );
        let end = |line: &str, text: &str| line.find(text).map(|i| i + text.len());
        assert_eq!(end(lines[0], "EPOCH"), end(lines[1], " 1"), "{table}");
        assert_eq!(end(lines[0], "CLOCK"), end(lines[1], "-45.2s!"), "{table}");
    }
}
