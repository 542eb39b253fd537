//! The dashboard's HTML: `/` (caps and occupancy, active runs, the queue, recent runs,
//! projects) and `/runs/{id}` (one run and its log).
//!
//! Rendered here in full, so the page is readable with JavaScript disabled; the script
//! (`assets/dashboard.js`) then keeps it current by polling `/api/overview`, or, on a run's
//! page, `/api/runs/{id}` and its log, and renders the same tables the same way. Both read the
//! JSON of `/api/overview`, so the two renderings cannot drift apart in what they show.
//! Everything that comes from the database or the config is escaped ([`esc`]).

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;

use super::api::{get_run, read_overview, RunIdPath};
use super::log::{chunk_of, LOG_CHUNK};
use super::observed::{unavailable, Observed};
use crate::runs_json::run_json;

/// `text` escaped for HTML text and attribute values.
pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as table text: strings bare, null empty.
fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An RFC 3339 instant as `HH:MM:SS` (the page's times are UTC and recent).
fn clock(v: &Value) -> String {
    let s = text(v);
    s.get(11..19).map(str::to_string).unwrap_or(s)
}

/// The page around `body`.
fn page(title: &str, kind: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><link rel=\"stylesheet\" href=\"/assets/dashboard.css\"></head>\
         <body data-page=\"{kind}\">{body}<script src=\"/assets/dashboard.js\"></script></body></html>\n",
        esc(title)
    )
}

/// A table with `id`, a header row of `columns`, and `rows` (already HTML).
fn table(id: &str, columns: &[&str], rows: &str, empty: &str) -> String {
    let mut out = format!("<table id=\"{id}\"><thead><tr>");
    for c in columns {
        let _ = write!(out, "<th>{}</th>", esc(c));
    }
    out.push_str("</tr></thead><tbody>");
    if rows.is_empty() {
        let _ = write!(
            out,
            "<tr class=\"empty\"><td colspan=\"{}\">{}</td></tr>",
            columns.len(),
            esc(empty)
        );
    } else {
        out.push_str(rows);
    }
    out.push_str("</tbody></table>");
    out
}

/// A run's id cell, linking to its page.
fn run_link(run: &Value) -> String {
    let id = run["id"].as_i64().unwrap_or(0);
    format!("<a href=\"/runs/{id}\">{id}</a>")
}

/// A run's exit: its code, or the signal that ended it.
fn exit(run: &Value) -> String {
    match (&run["exit_code"], &run["signal"]) {
        (Value::Number(c), _) => c.to_string(),
        (_, Value::Number(s)) => format!("sig {s}"),
        _ => String::new(),
    }
}

/// Seconds between two RFC 3339 instants, as `1m 5s`.
fn between(from: &Value, to: &Value) -> String {
    let parse = |v: &Value| {
        v.as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
    };
    match (parse(from), parse(to)) {
        (Some(a), Some(b)) if b >= a => {
            let secs = (b - a).num_seconds() as u64;
            humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
        }
        _ => String::new(),
    }
}

/// A run's row: `cells` after its id, with its id and status as attributes.
fn run_row(run: &Value, cells: &[String]) -> String {
    let mut out = format!(
        "<tr data-run-id=\"{}\" data-status=\"{}\"><td>{}</td>",
        run["id"].as_i64().unwrap_or(0),
        esc(&text(&run["status"])),
        run_link(run)
    );
    for c in cells {
        let _ = write!(out, "<td>{}</td>", esc(c));
    }
    out.push_str("</tr>");
    out
}

/// The body of `/` for an overview (`/api/overview`'s JSON).
fn index_body(v: &Value) -> String {
    let now = &v["now"];
    let mut ns_rows = String::new();
    if let Some(map) = v["namespaces"].as_object() {
        for (name, ns) in map {
            let cap = match &ns["max_concurrency"] {
                Value::Null => "global".to_string(),
                c => c.to_string(),
            };
            let full = ns["max_concurrency"]
                .as_u64()
                .is_some_and(|c| ns["active"].as_u64() >= Some(c));
            let _ = write!(
                ns_rows,
                "<tr data-namespace=\"{}\"{}><td>{}</td><td class=\"occupancy\">{} / {}</td><td>{}</td><td>{}</td></tr>",
                esc(name),
                if full { " class=\"full\"" } else { "" },
                esc(name),
                ns["active"],
                esc(&cap),
                ns["queued"],
                esc(&between(&ns["oldest_queued_at"], now)),
            );
        }
    }
    let runs = |key: &str, f: &dyn Fn(&Value) -> Vec<String>| -> String {
        v[key]
            .as_array()
            .map(|a| a.iter().map(|r| run_row(r, &f(r))).collect())
            .unwrap_or_default()
    };
    let active = runs("active", &|r| {
        vec![
            text(&r["project"]),
            text(&r["namespace"]),
            text(&r["status"]),
            between(&r["started_at"], now),
        ]
    });
    let queued = runs("queued", &|r| {
        vec![
            text(&r["project"]),
            text(&r["namespace"]),
            text(&r["trigger"]),
            between(&r["enqueued_at"], now),
        ]
    });
    let recent = runs("recent", &|r| {
        vec![
            text(&r["project"]),
            text(&r["status"]),
            text(&r["trigger"]),
            exit(r),
            between(&r["started_at"], &r["finished_at"]),
            clock(&r["finished_at"]),
        ]
    });
    let mut project_rows = String::new();
    for p in v["projects"].as_array().into_iter().flatten() {
        let _ = write!(
            project_rows,
            "<tr data-project=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&text(&p["project"])),
            esc(&text(&p["project"])),
            esc(&text(&p["namespace"])),
            esc(&text(&p["schedule"])),
            esc(&text(&p["next_occurrence"])),
            esc(&text(&p["last_status"])),
            esc(&text(&p["last_finished_at"])),
        );
    }
    let d = &v["daemon"];
    let healthy = d["healthy"].as_bool().unwrap_or(false);
    format!(
        "<header><h1>fleet</h1><span id=\"health\" class=\"{}\">{}</span> \
         <span id=\"daemon\">pid {} · epoch {} · since {}</span> \
         <span id=\"updated\">at {}</span></header><main>\
         <section><h2>Namespaces <small>global {} / {}</small></h2>{}</section>\
         <section><h2>Active runs</h2>{}</section>\
         <section><h2>Queue</h2>{}</section>\
         <section><h2>Recent runs</h2>{}</section>\
         <section><h2>Projects</h2>{}</section></main>",
        if healthy { "ok" } else { "stuck" },
        esc(&text(&d["health"])),
        d["pid"],
        d["epoch"],
        esc(&text(&d["started_at"])),
        esc(&clock(now)),
        v["global"]["active"],
        v["global"]["max_concurrency"],
        table(
            "namespaces",
            &["namespace", "active / cap", "queued", "oldest queued"],
            &ns_rows,
            "no namespace"
        ),
        table(
            "active",
            &["run", "project", "namespace", "status", "age"],
            &active,
            "nothing running"
        ),
        table(
            "queued",
            &["run", "project", "namespace", "trigger", "waiting"],
            &queued,
            "nothing queued"
        ),
        table(
            "recent",
            &[
                "run",
                "project",
                "status",
                "trigger",
                "exit",
                "duration",
                "ended (UTC)"
            ],
            &recent,
            "no runs yet"
        ),
        table(
            "projects",
            &[
                "project",
                "namespace",
                "schedule",
                "next occurrence",
                "last outcome",
                "ended at"
            ],
            &project_rows,
            "no projects"
        ),
    )
}

/// `GET /`.
pub(super) async fn index(State(o): State<Arc<Observed>>) -> Response {
    match o.read(read_overview).await {
        Ok(Ok(v)) => Html(page("fleet", "index", &index_body(&v.value))).into_response(),
        Ok(Err(e)) => unavailable(&e),
        Err(e) => unavailable(&e),
    }
}

/// `GET /runs/{id}`: the run, and the last 256 KiB of its log, which the script follows
/// (another host's run: relayed from that host, or the tail the database kept, see
/// [`super::log`]).
pub(super) async fn run(State(o): State<Arc<Observed>>, RunIdPath(id): RunIdPath) -> Response {
    let row = match get_run(&o, id).await {
        Ok(r) => r,
        Err(res) => return res,
    };
    let run = run_json(&row);
    let log = match chunk_of(&o, row.clone(), u64::MAX, false).await {
        Ok(end) => {
            // The last chunk's worth of output; all that is kept, behind the marker line
            // that counts every byte dropped, when it is no more than that.
            let from = match end.chunk.size.saturating_sub(LOG_CHUNK) {
                from if from <= end.chunk.first => 0,
                from => from,
            };
            chunk_of(&o, row, from, false).await.map(|c| (from, c))
        }
        Err(e) => Err(e),
    };
    let (from, next, bytes, source, note) = match log {
        Ok((from, served)) => {
            let note = match (&served.source, served.cut_from) {
                (Some(s), Some(host)) if s == "tail-cut" => format!(
                    "the end of the log, as the database kept it; the whole log is on host {host}"
                ),
                (Some(s), None) if s == "tail-cut" => {
                    "the end of the log, as the database kept it".to_string()
                }
                _ => String::new(),
            };
            (
                from,
                served.chunk.next,
                served.chunk.bytes,
                served.source.unwrap_or_default(),
                note,
            )
        }
        Err(e) => (0, 0, Vec::new(), String::new(), e.reason),
    };
    let mut rows = String::new();
    for key in [
        "project",
        "namespace",
        "status",
        "attempt",
        "trigger",
        "occurrence",
        "exit_code",
        "signal",
        "reason",
        "enqueued_at",
        "started_at",
        "finished_at",
    ] {
        let _ = write!(
            rows,
            "<tr><th>{key}</th><td data-field=\"{key}\">{}</td></tr>",
            esc(&text(&run[key]))
        );
    }
    let body = format!(
        "<header><h1><a href=\"/\">fleet</a> · run {id}</h1></header><main>\
         <table id=\"run\" data-run-id=\"{id}\" data-status=\"{}\"><tbody>{rows}</tbody></table>\
         <h2>Log{}</h2><p id=\"log-note\" class=\"note\">{}</p>\
         <pre id=\"log\" data-run-id=\"{id}\" data-offset=\"{next}\" data-source=\"{}\">{}</pre></main>",
        esc(&text(&run["status"])),
        if from > 0 { " (its end)" } else { "" },
        esc(&note),
        esc(&source),
        esc(&String::from_utf8_lossy(&bytes)),
    );
    Html(page(&format!("fleet · run {id}"), "run", &body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn everything_markup_could_use_is_escaped() {
        assert_eq!(
            esc(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }
}
