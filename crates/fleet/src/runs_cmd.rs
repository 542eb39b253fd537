//! `fleet runs`: reads the filters, checks the names against the config and the database, and
//! prints the runs as JSON, as a table that fits the terminal, or as tab-separated lines.

use std::io::IsTerminal;

use store::{Millis, RunFilter, RunStatus, Store, Trigger};
use supervisor::config::DEFAULT_NAMESPACE;

use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};
use crate::{console, runs_view};

/// What `fleet runs` was asked for.
pub struct RunsArgs {
    /// `--project`.
    pub project: Option<String>,
    /// `--status`, each.
    pub status: Vec<String>,
    /// `--namespace`.
    pub namespace: Option<String>,
    /// `--trigger`.
    pub trigger: Option<String>,
    /// `--since`.
    pub since: Option<String>,
    /// `--until`.
    pub until: Option<String>,
    /// `--limit`.
    pub limit: u32,
    /// `--json`.
    pub json: bool,
    /// `--no-headers`.
    pub no_headers: bool,
    /// `--table`.
    pub table: bool,
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
    let state = ctx.state(IfInvalid::Refuse)?;
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
        return console::println(runs_view::plain(runs, pauses, now, headers));
    }
    let empty = if filtered { "no runs match" } else { "no runs" };
    console::println(runs_view::table(runs, pauses, now, headers, width(), empty))
}

/// `fleet runs --json`: one array, each run in the shape the HTTP API serves too
/// ([`supervisor::report::run_json`]).
fn runs_json(runs: &[store::Run]) -> String {
    serde_json::Value::Array(runs.iter().map(supervisor::report::run_json).collect()).to_string()
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

/// The table's width in columns: `$COLUMNS` when it is a number from 1 to 65535, else the
/// terminal's when it reports one above 0 (a pseudo-terminal may report 0×0), else
/// [`runs_view::DEFAULT_WIDTH`] (80). Anything else in `$COLUMNS` (`abc`, `0`, `-5`, a number
/// past 65535) counts as unset.
pub(crate) fn width() -> usize {
    let valid = |n: u16| (n > 0).then_some(usize::from(n));
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .and_then(valid)
    {
        return n;
    }
    comfy_table::Table::new()
        .width()
        .and_then(valid)
        .unwrap_or(runs_view::DEFAULT_WIDTH)
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
