//! `fleet runs`: reads the filters, checks the names against the config and the database, and
//! prints the runs as JSON, as a table that fits the terminal, or as tab-separated lines.

use std::io::IsTerminal;
use std::path::Path;

use store::{Millis, RunFilter, RunStatus, Store, Trigger};
use supervisor::config::{Config, DEFAULT_NAMESPACE};

use crate::cli::{open_existing_at, state_of, Failure, Result};
use crate::{console, output, runs_view};

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
pub fn runs(path: &Path, args: RunsArgs) -> Result<()> {
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
    let state = state_of(path)?;
    // The config only to tell a misspelled name from one without runs; with --state-dir and a
    // broken file, the database alone decides.
    let config = Config::load(path).ok();
    let store = open_existing_at(&state)?;
    if let Some(p) = &args.project {
        let known = config.as_ref().is_some_and(|c| c.projects.contains_key(p))
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
                path.display()
            )));
        }
    }
    if let Some(n) = &args.namespace {
        let known = n == DEFAULT_NAMESPACE
            || config
                .as_ref()
                .is_some_and(|c| c.namespaces.contains_key(n))
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
                path.display()
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
    let (runs, pauses) = match &store {
        Some(store) => (
            store.list_runs(&filter).map_err(Failure::action)?,
            store.paused().map_err(Failure::action)?,
        ),
        None => (Vec::new(), store::Pauses::default()),
    };
    if args.json {
        return console::println(output::runs_json(&runs));
    }
    let headers = !args.no_headers;
    let terminal = std::io::stdout().is_terminal();
    if !terminal && !args.table {
        if runs.is_empty() {
            return Ok(());
        }
        return console::println(runs_view::plain(&runs, &pauses, now, headers));
    }
    console::println(runs_view::table(&runs, &pauses, now, headers, width()))
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
    Ok(!store
        .list_runs(&filter)
        .map_err(Failure::action)?
        .is_empty())
}

/// The table's width: `$COLUMNS` when set to a number, else the terminal's, else
/// [`runs_view::DEFAULT_WIDTH`].
pub(crate) fn width() -> usize {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return n;
    }
    comfy_table::Table::new()
        .width()
        .map_or(runs_view::DEFAULT_WIDTH, usize::from)
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
