//! The JSON under `/api/` (documented in docs/REFERENCE.md). A run is the object
//! `fleet runs --json` prints ([`crate::report::run_json`]); `/api/overview` is what the
//! dashboard shows, in one read.
//!
//! Every handler reads the database on a blocking thread and writes nothing.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use store::{now_ms, rfc3339, Millis, Run, RunFilter, RunId, RunStatus, StoreError};

use super::{unavailable, Observed};
use crate::health::Verdict;
use crate::report::{run_json, time_json};
use crate::shim::runfiles::RunFiles;

/// The most runs one `/api/runs` answer lists.
const MAX_LIMIT: u32 = 1000;
/// The most bytes of log one `/api/runs/{id}/log` answer carries.
pub(super) const LOG_CHUNK: u64 = 256 * 1024;
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
    let active = o.store.active_runs()?;
    let queued = o.store.list_runs(&RunFilter {
        status: Some(RunStatus::Queued),
        limit: Some(OVERVIEW_RUNS),
        ..RunFilter::default()
    })?;
    let recent = o.store.list_runs(&RunFilter {
        limit: Some(OVERVIEW_RUNS),
        ..RunFilter::default()
    })?;
    let queue = o.store.queue_summary(now_ms())?;
    let ended = o.store.ended_totals()?;
    let schedules = o.store.schedules()?;

    let mut namespaces: BTreeMap<String, Value> = BTreeMap::new();
    let mut ns_names: Vec<String> = config.namespaces.keys().cloned().collect();
    ns_names.push(crate::config::DEFAULT_NAMESPACE.into());
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
pub(super) async fn runs(State(o): State<Arc<Observed>>, Query(q): Query<RunsQuery>) -> Response {
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
    let namespace = q.namespace.as_ref().filter(|n| {
        n.as_str() != crate::config::DEFAULT_NAMESPACE && !config.namespaces.contains_key(*n)
    });
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
                if o.store.list_runs(&any)?.is_empty() {
                    return Ok(Err(format!(
                        "unknown {what} {name:?} (not in the config in force and no runs)"
                    )));
                }
            }
            o.store.list_runs(&filter).map(Ok)
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
pub(super) async fn run(State(o): State<Arc<Observed>>, Path(id): Path<RunId>) -> Response {
    match get_run(&o, id).await {
        Ok(run) => Json(run_json(&run)).into_response(),
        Err(res) => res,
    }
}

/// The query of `/api/runs/{id}/log`.
#[derive(Deserialize)]
pub(super) struct LogQuery {
    /// The first byte wanted (default 0).
    offset: Option<u64>,
}

/// Up to [`LOG_CHUNK`] bytes of run `id`'s log from byte `offset` cut to character boundaries
/// (see [`utf8_cut`]), the byte offset they start at, and the log's size then. A log not
/// written yet reads as empty.
pub(super) fn read_log(
    state_dir: &std::path::Path,
    id: RunId,
    offset: u64,
) -> std::io::Result<(Vec<u8>, u64, u64)> {
    let path = RunFiles::new(state_dir, id).log_path();
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0, 0)),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    let from = offset.min(size);
    file.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    file.take(LOG_CHUNK).read_to_end(&mut buf)?;
    let start = utf8_cut(&mut buf);
    Ok((buf, from + start as u64, size))
}

/// Cuts `buf` (log bytes read from some offset) to UTF-8 character boundaries, so that each
/// chunk decodes on its own: drops up to 3 leading continuation bytes (an offset inside a
/// character) and a trailing incomplete character (cut by the chunk's size, or not fully
/// written yet), unless nothing else is left. Returns how many bytes were dropped at the
/// start. Bytes that are not UTF-8 at all are left as they are.
fn utf8_cut(buf: &mut Vec<u8>) -> usize {
    let skip = buf
        .iter()
        .take(3)
        .take_while(|b| (**b & 0xC0) == 0x80)
        .count();
    if skip > 0 && skip < buf.len() {
        buf.drain(..skip);
    } else if skip > 0 {
        return 0;
    }
    // Only the last 4 bytes can hold an incomplete character.
    let tail_from = buf.len().saturating_sub(4);
    let tail = &buf[tail_from..];
    for lead in (0..tail.len()).rev() {
        let b = tail[lead];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        let at = tail_from + lead;
        if need > buf.len() - at && at > 0 {
            buf.truncate(at);
        }
        break;
    }
    skip
}

/// `GET /api/runs/{id}/log?offset=N`: the run's log (stdout and stderr) from byte N, at most
/// 256 KiB, as `text/plain`; the header `X-Log-Next-Offset` says where the next read starts and
/// `X-Log-Size` how long the log was. 404 for an unknown run.
pub(super) async fn log(
    State(o): State<Arc<Observed>>,
    Path(id): Path<RunId>,
    Query(q): Query<LogQuery>,
) -> Response {
    if let Err(res) = get_run(&o, id).await {
        return res;
    }
    let offset = q.offset.unwrap_or(0);
    match o.read(move |o| read_log(&o.state_dir, id, offset)).await {
        Ok(Ok((bytes, start, size))) => {
            let next = start + bytes.len() as u64;
            (
                [
                    (
                        header::CONTENT_TYPE,
                        "text/plain; charset=utf-8".to_string(),
                    ),
                    (
                        header::HeaderName::from_static("x-log-next-offset"),
                        next.to_string(),
                    ),
                    (
                        header::HeaderName::from_static("x-log-size"),
                        size.to_string(),
                    ),
                ],
                bytes,
            )
                .into_response()
        }
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("run {id}: the log could not be read: {e}\n"),
        )
            .into_response(),
        Err(e) => unavailable(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::utf8_cut;

    #[test]
    fn chunks_are_cut_on_character_boundaries() {
        let text = "aé€😀b".as_bytes().to_vec();
        // Every start and end offset: what is kept decodes, and is the text between boundaries.
        for from in 0..text.len() {
            for to in from + 1..=text.len() {
                let mut buf = text[from..to].to_vec();
                let skipped = utf8_cut(&mut buf);
                if std::str::from_utf8(&text[from..to]).is_ok() {
                    assert_eq!(skipped, 0);
                    assert_eq!(buf, &text[from..to]);
                }
                if buf.len() > 3 || std::str::from_utf8(&buf).is_ok() {
                    let kept = &text[from + skipped..from + skipped + buf.len()];
                    assert_eq!(buf, kept);
                }
                // Only a piece of one character, alone, is left as it is.
                if buf.len() > 3 {
                    assert!(std::str::from_utf8(&buf).is_ok(), "{from}..{to}: {buf:?}");
                }
            }
        }
    }
}
