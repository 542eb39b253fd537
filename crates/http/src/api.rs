//! The JSON under `/api/` (documented in docs/REFERENCE.md). A run is the object
//! `fleet runs --json` prints ([`crate::runs_json::run_json`]); `/api/overview` is what the
//! dashboard shows, in one read.
//!
//! Every handler reads the database on a blocking thread and writes nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use health::Verdict;
use serde::Deserialize;
use serde_json::{json, Value};
use store::{now_ms, rfc3339, Millis, Run, RunFilter, RunId, RunStatus, StoreError};

use super::observed::{unavailable, Observed};
use crate::runs_json::{run_json, time_json};

/// A run id from the path, or a one-line 400 naming it (axum's own answer has no newline and
/// speaks of parsing).
pub(super) struct RunIdPath(pub(super) RunId);

impl<S: Send + Sync> FromRequestParts<S> for RunIdPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match Path::<RunId>::from_request_parts(parts, state).await {
            Ok(Path(id)) => Ok(RunIdPath(id)),
            Err(e) => Err((
                StatusCode::BAD_REQUEST,
                format!("bad run id (a whole number): {}\n", e.body_text()),
            )
                .into_response()),
        }
    }
}

/// A query string as `T`, or a one-line 400 naming what is wrong in it.
pub(super) struct QueryOf<T>(pub(super) T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryOf<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(q)) => Ok(QueryOf(q)),
            Err(e) => Err((
                StatusCode::BAD_REQUEST,
                format!("bad query: {}\n", e.body_text()),
            )
                .into_response()),
        }
    }
}

/// The most runs one `/api/runs` answer lists.
const MAX_LIMIT: u32 = 1000;
/// How many queued, and recent, runs the overview lists.
const OVERVIEW_RUNS: u32 = 50;

/// Everything the dashboard shows, read at once.
pub(super) struct Overview {
    pub(super) value: Value,
}

/// Reads the overview (blocking: call from a blocking thread).
pub(super) fn read_overview(o: &Observed) -> Result<Overview, StoreError> {
    let now = now_ms();
    let config = o.config();
    // Rows another program left unreadable are left out of the lists, and named apart: one
    // such row must not blank the whole page.
    let store::RunRows {
        runs: active,
        mut unreadable,
    } = o.store.active_rows()?;
    let queued = o.store.list_rows(&RunFilter {
        status: Some(RunStatus::Queued),
        limit: Some(OVERVIEW_RUNS),
        ..RunFilter::default()
    })?;
    let recent = o.store.list_rows(&RunFilter {
        limit: Some(OVERVIEW_RUNS),
        ..RunFilter::default()
    })?;
    unreadable.extend(queued.unreadable.into_iter().chain(recent.unreadable));
    unreadable.sort_by_key(|r| r.id);
    unreadable.dedup_by_key(|r| r.id);
    let (queued, recent) = (queued.runs, recent.runs);
    let queue = o.store.queue_summary(now_ms())?;
    let ended = o.store.ended_totals()?;
    let schedules = o.store.schedules()?;

    let mut namespaces: BTreeMap<String, Value> = BTreeMap::new();
    let mut ns_names: Vec<String> = config.namespaces.keys().cloned().collect();
    ns_names.push(config::DEFAULT_NAMESPACE.into());
    ns_names.extend(active.iter().map(|r| r.namespace.clone()));
    ns_names.extend(queue.iter().map(|q| q.namespace.clone()));
    for name in ns_names {
        let cap = config.namespaces.get(&name);
        let q = queue.iter().find(|q| q.namespace == name);
        namespaces.insert(
            name.clone(),
            json!({
                "active": active.iter().filter(|r| r.namespace == name).count(),
                "max_concurrency": cap.map(|c| c.max_concurrency),
                "weight": cap.map(|c| c.weight),
                "queued": q.map_or(0, |q| q.queued),
                "oldest_queued_at": time_json(q.map(|q| q.oldest_enqueued_at)),
            }),
        );
    }

    // The last outcome of each project: its most recent end, whatever the status.
    let mut last: BTreeMap<&str, (Millis, RunStatus)> = BTreeMap::new();
    for t in &ended {
        if let Some(at) = t.last_finished_at {
            let e = last.entry(&t.project).or_insert((at, t.status));
            if at > e.0 {
                *e = (at, t.status);
            }
        }
    }
    let projects: Vec<Value> = config
        .projects
        .values()
        .map(|p| {
            let next = schedules
                .iter()
                .find(|s| s.project == p.name)
                .and_then(|s| s.next_fire);
            let last = last.get(p.name.as_str());
            json!({
                "project": p.name,
                "namespace": p.namespace,
                "schedule": p.schedule.as_ref().map(|s| s.to_string()),
                "next_occurrence": time_json(next),
                "last_status": last.map(|(_, s)| s.as_str()),
                "last_finished_at": time_json(last.map(|(at, _)| *at)),
                "active": active.iter().any(|r| r.project == p.name),
            })
        })
        .collect();
    let (healthy, health) = match o.health.verdict(now) {
        Verdict::Evaluating { .. } => (true, "evaluating".to_string()),
        Verdict::Stuck { reason } => (false, reason),
    };
    Ok(Overview {
        value: json!({
            "now": rfc3339(now),
            "daemon": {
                "pid": o.pid,
                "epoch": o.epoch,
                "started_at": rfc3339(o.health.started_at()),
                "healthy": healthy,
                "health": health,
            },
            "global": {"active": active.len(), "max_concurrency": config.max_concurrency},
            "namespaces": namespaces,
            "active": active.iter().map(run_json).collect::<Vec<_>>(),
            "queued": queued.iter().map(run_json).collect::<Vec<_>>(),
            "recent": recent.iter().map(run_json).collect::<Vec<_>>(),
            "unreadable": unreadable
                .iter()
                .map(|r| json!({"id": r.id, "project": r.project, "error": r.error}))
                .collect::<Vec<_>>(),
            "projects": projects,
        }),
    })
}

/// `GET /api/overview`.
pub(super) async fn overview(State(o): State<Arc<Observed>>) -> Response {
    match o.read(read_overview).await {
        Ok(Ok(v)) => Json(v.value).into_response(),
        Ok(Err(e)) => unavailable(&e),
        Err(e) => unavailable(&e),
    }
}

/// The query of `/api/runs`: the filters of `fleet runs`.
#[derive(Deserialize)]
pub(super) struct RunsQuery {
    project: Option<String>,
    namespace: Option<String>,
    status: Option<String>,
    limit: Option<u32>,
}

/// `GET /api/runs?project=P&namespace=N&status=S&limit=N`: the array `fleet runs --json` prints, newest
/// first (at most 1000; 100 by default). A `limit` of 0 is refused (400), as `fleet runs --limit
/// 0` is: an empty answer would read as "no runs".
pub(super) async fn runs(
    State(o): State<Arc<Observed>>,
    QueryOf(q): QueryOf<RunsQuery>,
) -> Response {
    if q.limit == Some(0) {
        return (StatusCode::BAD_REQUEST, "limit must be at least 1\n").into_response();
    }
    let status = match q.status.as_deref().map(str::parse::<RunStatus>) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("unknown status {:?}\n", q.status.unwrap_or_default()),
            )
                .into_response()
        }
    };
    let config = o.config();
    // Same rule as `fleet runs`: a name is known if the config in force has it or a run has
    // it, so a misspelling answers 404 instead of an empty list.
    let project = q
        .project
        .clone()
        .filter(|p| !config.projects.contains_key(p));
    let namespace = q
        .namespace
        .as_ref()
        .filter(|n| n.as_str() != config::DEFAULT_NAMESPACE && !config.namespaces.contains_key(*n));
    let unknown = [("project", project), ("namespace", namespace.cloned())];
    let filter = RunFilter {
        project: q.project.clone(),
        namespace: q.namespace.clone(),
        status,
        limit: Some(q.limit.unwrap_or(100).min(MAX_LIMIT)),
        ..RunFilter::default()
    };
    let read = o
        .read(move |o| -> Result<_, StoreError> {
            for (what, name) in unknown {
                let Some(name) = name else { continue };
                let any = RunFilter {
                    project: (what == "project").then(|| name.clone()),
                    namespace: (what == "namespace").then(|| name.clone()),
                    limit: Some(1),
                    ..RunFilter::default()
                };
                let rows = o.store.list_rows(&any)?;
                if rows.runs.is_empty() && rows.unreadable.is_empty() {
                    return Ok(Err(format!(
                        "unknown {what} {name:?} (not in the config in force and no runs)"
                    )));
                }
            }
            // A row fleet cannot read is left out (the overview names it).
            o.store.list_rows(&filter).map(|rows| Ok(rows.runs))
        })
        .await;
    match read {
        Ok(Ok(Err(why))) => (StatusCode::NOT_FOUND, Json(json!({ "error": why }))).into_response(),
        Ok(Ok(Ok(runs))) => Json(Value::Array(runs.iter().map(run_json).collect())).into_response(),
        Ok(Err(e)) => unavailable(&e),
        Err(e) => unavailable(&e),
    }
}

/// One run, or the response to send instead (404 for an unknown id).
pub(super) async fn get_run(o: &Arc<Observed>, id: RunId) -> Result<Run, Response> {
    match o.read(move |o| o.store.get_run(id)).await {
        Ok(Ok(run)) => Ok(run),
        Ok(Err(StoreError::UnknownRun(_))) => {
            Err((StatusCode::NOT_FOUND, format!("no run {id}\n")).into_response())
        }
        Ok(Err(e)) => Err(unavailable(&e)),
        Err(e) => Err(unavailable(&e)),
    }
}

/// `GET /api/runs/{id}`: the run as `fleet runs --json` prints it.
pub(super) async fn run(State(o): State<Arc<Observed>>, RunIdPath(id): RunIdPath) -> Response {
    match get_run(&o, id).await {
        Ok(run) => Json(run_json(&run)).into_response(),
        Err(res) => res,
    }
}
