//! `fleet runs`: reads the filters, checks the names against the config and the database, and
//! prints the runs as JSON, as a table that fits the terminal, or as tab-separated lines
//! ([`table`]).

mod table;

use std::io::IsTerminal;

use config::DEFAULT_NAMESPACE;
use store::{Millis, RunFilter, RunStatus, Store, Trigger};

use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};
use crate::{console, fit};

/// What `fleet runs` was asked for.
#[derive(clap::Args, Debug)]
pub struct RunsArgs {
    /// Only this project's runs.
    #[arg(long, value_name = "NAME")]
    pub project: Option<String>,
    /// Only runs in this status (queued, starting, running, succeeded, failed, timed_out,
    /// cancelled, lost); repeat it for several.
    #[arg(long)]
    pub status: Vec<String>,
    /// Only runs counted in this namespace.
    #[arg(long, value_name = "NAME")]
    pub namespace: Option<String>,
    /// Only runs of this trigger (manual, schedule, retry, rerun, on_failure).
    #[arg(long)]
    pub trigger: Option<String>,
    /// Only runs enqueued since WHEN: a duration ago ("2h", "30m") or an RFC 3339 time.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only runs enqueued until WHEN: a duration ago ("2h") or an RFC 3339 time.
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// At most this many (1 or more).
    #[arg(long, default_value_t = 50, value_name = "N",
          value_parser = limit_arg)]
    pub limit: u32,
    /// One JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Leave out the header line.
    #[arg(long)]
    pub no_headers: bool,
    /// The table even when stdout is not a terminal (instead of tab-separated lines).
    #[arg(long, conflicts_with = "json")]
    pub table: bool,
}

/// `fleet runs --limit N`: a whole number of 1 or more (0 would show nothing but a header, which
/// reads as "no runs").
fn limit_arg(n: &str) -> std::result::Result<u32, String> {
    match n.parse::<u32>() {
        Ok(0) => Err("must be 1 or more".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("must be a whole number from 1 to {}", u32::MAX)),
    }
}

/// `fleet runs`: newest first, filtered.
///
/// Errors: exit 2 for a bad status, trigger or time, and for a project or namespace that is
/// neither in the config nor in the database (a misspelled name would otherwise print "no
/// runs"); 1 when the database cannot be read.
pub fn runs(ctx: &Ctx, args: RunsArgs) -> Result<()> {
    let now = store::now_ms();
    let statuses = args
        .status
        .iter()
        .map(|s| s.parse::<RunStatus>().map_err(Failure::input))
        .collect::<Result<Vec<_>>>()?;
    let trigger = args
        .trigger
        .as_deref()
        .map(|t| {
            Trigger::parse(t).ok_or_else(|| {
                Failure::input(format!(
                    "unknown trigger {t:?}; expected one of manual, schedule, retry, rerun, on_failure"
                ))
            })
        })
        .transpose()?;
    let since = args
        .since
        .as_deref()
        .map(|w| when(w, "--since", now))
        .transpose()?;
    let until = args
        .until
        .as_deref()
        .map(|w| when(w, "--until", now))
        .transpose()?;
    if let (Some(s), Some(u)) = (since, until) {
        if s > u {
            return Err(Failure::input(format!(
                "--since {:?} is later than --until {:?}: no run can match",
                args.since.as_deref().unwrap_or(""),
                args.until.as_deref().unwrap_or("")
            )));
        }
    }
    let filtered = args.project.is_some()
        || !args.status.is_empty()
        || args.namespace.is_some()
        || args.trigger.is_some()
        || since.is_some()
        || until.is_some();
    let state = ctx.state(IfInvalid::Warn)?;
    // The config only to tell a misspelled name from one without runs; with --state-dir and a
    // broken file, the database alone decides.
    let config = ctx.config_if_valid();
    let store = ctx::open_existing(&state)?;
    if let Some(p) = &args.project {
        let known = config.is_some_and(|c| c.projects.contains_key(p))
            || has_runs(
                store.as_ref(),
                RunFilter {
                    project: Some(p.clone()),
                    ..RunFilter::default()
                },
            )?;
        if !known {
            return Err(Failure::input(format!(
                "unknown project {p:?} (not in {} and no runs)",
                ctx.path().display()
            )));
        }
    }
    if let Some(n) = &args.namespace {
        let known = n == DEFAULT_NAMESPACE
            || config.is_some_and(|c| c.namespaces.contains_key(n))
            || has_runs(
                store.as_ref(),
                RunFilter {
                    namespace: Some(n.clone()),
                    ..RunFilter::default()
                },
            )?;
        if !known {
            return Err(Failure::input(format!(
                "unknown namespace {n:?} (not in {} and no runs)",
                ctx.path().display()
            )));
        }
    }
    let filter = RunFilter {
        project: args.project,
        limit: Some(args.limit),
        statuses,
        namespace: args.namespace,
        trigger,
        since,
        until,
        ..RunFilter::default()
    };
    let (rows, pauses) = match &store {
        Some(store) => (
            store.list_rows(&filter).map_err(Failure::action)?,
            store.paused().map_err(Failure::action)?,
        ),
        None => (store::RunRows::default(), store::Pauses::default()),
    };
    // A row another program wrote with a value fleet cannot read is left out, and named on
    // stderr after the rest: one such row must not hide every other run.
    let store::RunRows { runs, unreadable } = rows;
    let shape = Shape {
        json: args.json,
        table: args.table,
        headers: !args.no_headers,
    };
    listing(shape, &runs, &pauses, now, filtered)?;
    crate::unreadable::unless_all_read(&unreadable, "not listed")
}

/// How `fleet runs` prints: its `--json`, `--table` and (not) `--no-headers`.
struct Shape {
    json: bool,
    table: bool,
    headers: bool,
}

/// Prints `runs` in `shape`: JSON, plain lines for a pipe, or a table.
fn listing(
    shape: Shape,
    runs: &[store::Run],
    pauses: &store::Pauses,
    now: store::Millis,
    filtered: bool,
) -> Result<()> {
    if shape.json {
        return console::println(runs_json(runs));
    }
    let headers = shape.headers;
    let terminal = std::io::stdout().is_terminal();
    if !terminal && !shape.table {
        // The header line alone when nothing matches: a reader of the pipe still learns the
        // columns, and that the command ran.
        if runs.is_empty() && !headers {
            return Ok(());
        }
        return console::println(table::plain(runs, pauses, now, headers));
    }
    let empty = if filtered { "no runs match" } else { "no runs" };
    console::println(table::table(
        runs,
        pauses,
        now,
        headers,
        fit::terminal_width(),
        empty,
    ))
}

/// `fleet runs --json`: one array, each run in the shape the HTTP API serves too
/// ([`fleet_http::runs_json::run_json`]).
fn runs_json(runs: &[store::Run]) -> String {
    serde_json::Value::Array(runs.iter().map(fleet_http::runs_json::run_json).collect()).to_string()
}

/// Whether `filter` matches a run (false without a database).
fn has_runs(store: Option<&Store>, filter: RunFilter) -> Result<bool> {
    let Some(store) = store else {
        return Ok(false);
    };
    let filter = RunFilter {
        limit: Some(1),
        ..filter
    };
    let rows = store.list_rows(&filter).map_err(Failure::action)?;
    Ok(!rows.runs.is_empty() || !rows.unreadable.is_empty())
}

/// An instant given as a duration ago (`2h`, `30m`, humantime) or an RFC 3339 time, in
/// milliseconds since the Unix epoch, UTC. `flag` names the option in the error.
fn when(s: &str, flag: &str, now: Millis) -> Result<Millis> {
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now - d.as_millis().min(i64::MAX as u128) as i64);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| {
            Failure::input(format!(
                "{flag} {s:?}: expected a duration ago (\"2h\", \"30m\") or an RFC 3339 time (\"2026-11-30T08:00:00Z\")"
            ))
        })
}
