//! The JSON under `/api/` (documented in docs/REFERENCE.md). A run is the object
//! `fleet runs --json` prints ([`crate::report::run_json`]); `/api/overview` is what the
//! dashboard shows, in one read.
//!
//! Every handler reads the database on a blocking thread and writes nothing.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use store::{now_ms, rfc3339, Millis, Run, RunFilter, RunId, RunStatus, StoreError};

use super::{unavailable, Observed};
use crate::health::Verdict;
use crate::report::{run_json, time_json};
use crate::shim::logbound::{marker_line, parse_marker, MARKER_MAX_LEN};
use crate::shim::runfiles::RunFiles;

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
pub(super) async fn run(State(o): State<Arc<Observed>>, RunIdPath(id): RunIdPath) -> Response {
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

/// One read of a run's log, in positions of the command's whole output (see [`read_log`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct LogChunk {
    /// What to send: a marker line for output dropped before the log's oldest byte kept, when
    /// the position asked for is older than that, then the output itself.
    pub(super) bytes: Vec<u8>,
    /// The position to ask for next: where this chunk's output ends.
    pub(super) next: u64,
    /// How much output the command had written in all at the read (dropped bytes included).
    pub(super) size: u64,
    /// The position of the oldest output the log still holds (0 unless it was compacted).
    pub(super) first: u64,
}

/// Up to [`LOG_CHUNK`] bytes of run `id`'s log from position `offset` in the command's whole
/// output, cut to character boundaries (see [`utf8_cut`]). A log not written yet reads as
/// empty.
///
/// Positions count the output since the command started, not the bytes of the file: a log with
/// a size bound is compacted as it grows (its file replaced by one that starts with a marker
/// line saying how many bytes were dropped, see [`crate::shim::logbound`]), and a reader that
/// follows it by file offsets would skip or repeat output after each compaction. A position
/// older than the oldest output kept gets a marker line for the bytes it missed, then the
/// oldest output kept — as `fleet logs --follow` does with the file itself. One descriptor
/// reads the marker and the output, so they belong to the same file.
///
/// Errors: opening or reading the log (other than its absence).
pub(super) fn read_log(
    state_dir: &std::path::Path,
    id: RunId,
    offset: u64,
) -> std::io::Result<LogChunk> {
    let path = RunFiles::new(state_dir, id).log_path();
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(LogChunk {
                bytes: Vec::new(),
                next: 0,
                size: 0,
                first: 0,
            })
        }
        Err(e) => return Err(e),
    };
    let mut start = Vec::with_capacity(MARKER_MAX_LEN);
    (&mut file)
        .take(MARKER_MAX_LEN as u64)
        .read_to_end(&mut start)?;
    let (marker_len, dropped) = parse_marker(&start).map_or((0, 0), |(l, d)| (l as u64, d));
    let len = file.metadata()?.len();
    let size = dropped + len.saturating_sub(marker_len);
    let (mut bytes, from) = if offset < dropped {
        (marker_line(dropped - offset).into_bytes(), marker_len)
    } else {
        (Vec::new(), (marker_len + (offset - dropped)).min(len))
    };
    file.seek(SeekFrom::Start(from))?;
    let mut output = Vec::new();
    file.take(LOG_CHUNK).read_to_end(&mut output)?;
    let skipped = utf8_cut(&mut output);
    let next = dropped + (from + (skipped + output.len()) as u64).saturating_sub(marker_len);
    bytes.append(&mut output);
    Ok(LogChunk {
        bytes,
        next,
        size,
        first: dropped,
    })
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

/// `GET /api/runs/{id}/log?offset=N`: the run's log (stdout and stderr) from byte N of the
/// command's whole output, at most 256 KiB of it, as `text/plain` (see [`read_log`]); the
/// header `X-Log-Next-Offset` says where the next read starts and `X-Log-Size` how much output
/// there was in all. 404 for an unknown run; 400 for an id or offset that is not a whole number.
pub(super) async fn log(
    State(o): State<Arc<Observed>>,
    RunIdPath(id): RunIdPath,
    QueryOf(q): QueryOf<LogQuery>,
) -> Response {
    if let Err(res) = get_run(&o, id).await {
        return res;
    }
    let offset = q.offset.unwrap_or(0);
    match o.read(move |o| read_log(&o.state_dir, id, offset)).await {
        Ok(Ok(chunk)) => (
            [
                (
                    header::CONTENT_TYPE,
                    "text/plain; charset=utf-8".to_string(),
                ),
                (
                    header::HeaderName::from_static("x-log-next-offset"),
                    chunk.next.to_string(),
                ),
                (
                    header::HeaderName::from_static("x-log-size"),
                    chunk.size.to_string(),
                ),
            ],
            chunk.bytes,
        )
            .into_response(),
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
    use super::{read_log, utf8_cut, LogChunk};
    use crate::shim::logbound::marker_line;
    use crate::shim::runfiles::RunFiles;

    /// Positions count the command's whole output: in a compacted log, a position older than
    /// the oldest output kept gets a marker for the bytes it missed, a later one the output
    /// after it, so a reader that follows `next` neither repeats nor skips across a compaction.
    #[test]
    fn log_positions_count_the_whole_output_across_a_compaction() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runs")).unwrap();
        let log = RunFiles::new(dir.path(), 7).log_path();
        let read = |offset| read_log(dir.path(), 7, offset).unwrap();
        let chunk = |bytes: String, next, size, first| LogChunk {
            bytes: bytes.into_bytes(),
            next,
            size,
            first,
        };
        assert_eq!(read(0), chunk(String::new(), 0, 0, 0), "no log yet");

        // Never compacted: positions are the file's offsets.
        std::fs::write(&log, "0123456789").unwrap();
        assert_eq!(read(0), chunk("0123456789".into(), 10, 10, 0));
        assert_eq!(read(4), chunk("456789".into(), 10, 10, 0));
        assert_eq!(read(99), chunk(String::new(), 10, 10, 0));

        // Compacted: 1,000 bytes dropped, then the newest output, "abcdef" (positions
        // 1000..1006).
        std::fs::write(&log, format!("{}abcdef", marker_line(1_000))).unwrap();
        assert_eq!(
            read(0),
            chunk(format!("{}abcdef", marker_line(1_000)), 1_006, 1_006, 1_000)
        );
        assert_eq!(
            read(10),
            chunk(format!("{}abcdef", marker_line(990)), 1_006, 1_006, 1_000),
            "a reader at position 10 missed 990 bytes"
        );
        assert_eq!(read(1_002), chunk("cdef".into(), 1_006, 1_006, 1_000));
        assert_eq!(read(1_006), chunk(String::new(), 1_006, 1_006, 1_000));
        assert_eq!(read(u64::MAX), chunk(String::new(), 1_006, 1_006, 1_000));
    }

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
