//! `fleet projects [--json]`: each project of the config with its namespace, schedule and time
//! zone, next occurrence (UTC and local, from the persisted cursor, as the daemon computes it),
//! its latest ended run, its active and queued counts, and whether a pause holds it.

use std::collections::BTreeMap;

use config::schedule::next_occurrence;
use config::Config;
use serde_json::{json, Value};
use store::{rfc3339, Pauses, ProjectActivity, ScheduleRow};

use crate::console;
use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};
use crate::fit::{self, Column};

/// What `fleet projects` was asked.
#[derive(clap::Args, Debug)]
pub struct ProjectsArgs {
    /// One JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `fleet projects`: a table, or with `--json` one JSON array (fields in docs/REFERENCE.md).
///
/// Errors: exit 2 for an invalid config; 1 when the database cannot be read, and 1 after the
/// listing when a project's last ended run has a row fleet cannot read (another program's
/// write: that run is left out, and named on stderr).
pub fn projects(ctx: &Ctx, args: &ProjectsArgs) -> Result<()> {
    let config = ctx.config()?;
    let state = ctx.state(IfInvalid::Refuse)?;
    let (activity, schedules, pauses) = match ctx::open_existing(&state)? {
        Some(store) => (
            store.project_activity().map_err(Failure::action)?,
            store.schedules().map_err(Failure::action)?,
            store.paused().map_err(Failure::action)?,
        ),
        None => (Vec::new(), Vec::new(), Pauses::default()),
    };
    let list = rows(config, &activity, &schedules, &pauses, store::now_ms());
    if args.json {
        console::println(Value::Array(list))?;
    } else {
        console::println(text(&list))?;
    }
    let unreadable: Vec<store::UnreadableRun> = activity
        .into_iter()
        .filter_map(|a| a.last_ended_unreadable)
        .collect();
    crate::unreadable::unless_all_read(&unreadable, "its project's last run, not shown")
}

/// One JSON object per project of `config`, in name order.
fn rows(
    config: &Config,
    activity: &[ProjectActivity],
    schedules: &[ScheduleRow],
    pauses: &Pauses,
    now: store::Millis,
) -> Vec<Value> {
    let activity: BTreeMap<&str, &ProjectActivity> =
        activity.iter().map(|a| (a.project.as_str(), a)).collect();
    let schedules: BTreeMap<&str, &ScheduleRow> =
        schedules.iter().map(|s| (s.project.as_str(), s)).collect();
    config
        .projects
        .values()
        .map(|p| {
            let a = activity.get(p.name.as_str());
            let next = next_occurrence(p, schedules.get(p.name.as_str()).copied(), now);
            let held = pauses.holding(&p.name, &p.namespace);
            let last = a.and_then(|a| a.last_ended.as_ref());
            json!({
                "name": p.name,
                "namespace": p.namespace,
                "schedule": p.schedule,
                "timezone": p.schedule.as_ref().map(|_| p.timezone.as_deref().unwrap_or("UTC")),
                "next": next.as_ref().map(|n| rfc3339(n.at.timestamp_millis())),
                "next_local": next.as_ref().map(|n| n.local.clone()),
                "next_due": next.as_ref().map(|n| n.due),
                "last_run": last.map(|r| json!({
                    "id": r.id,
                    "status": r.status.as_str(),
                    "finished_at": r.finished_at.map(rfc3339),
                })),
                "active": a.map_or(0, |a| a.active),
                "queued": a.map_or(0, |a| a.queued),
                "max_parallel": p.max_parallel,
                "paused": held.is_some(),
                "paused_by": held.map(|h| h.kind.as_str()),
            })
        })
        .collect()
}

/// The table for people. On a terminal it fits its width with one line per project, as the
/// runs table does ([`fit`]): times lose their year, then NEXT (LOCAL), NAMESPACE, QUEUED,
/// ACTIVE, SCHEDULE and LAST RUN are dropped in that order, names cut with `…`. Elsewhere (a
/// pipe, a file) every column stays, whole.
fn text(list: &[Value]) -> String {
    if list.is_empty() {
        return "no projects".into();
    }
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let each = |f: &dyn Fn(&Value) -> String| list.iter().map(f).collect::<Vec<String>>();
    let next = |long: bool| {
        each(&|p| {
            let mut next = short(&s(&p["next"]), long);
            if p["next_due"].as_bool() == Some(true) {
                next += " (due)";
            }
            next
        })
    };
    let last = |long: bool| {
        each(&|p| match p["last_run"].as_object() {
            Some(r) => format!(
                "{} {} (run {})",
                r["status"].as_str().unwrap_or(""),
                short(r["finished_at"].as_str().unwrap_or(""), long),
                r["id"],
            ),
            None => "-".into(),
        })
    };
    let paused = |long: bool| {
        each(&|p| match p["paused_by"].as_str() {
            Some("namespace") if long => "yes (namespace)".to_string(),
            Some("namespace") => "yes (ns)".to_string(),
            Some(_) => "yes".to_string(),
            None => "no".to_string(),
        })
    };
    let cols = vec![
        Column::fixed("PROJECT", each(&|p| s(&p["name"]))).cut(16, 8),
        Column::fixed("NAMESPACE", each(&|p| s(&p["namespace"])))
            .cut(12, 8)
            .dropped(1),
        Column::fixed(
            "SCHEDULE",
            each(
                &|p| match (p["schedule"].as_str(), p["timezone"].as_str()) {
                    (Some(e), Some(tz)) if tz != "UTC" => format!("{e} ({tz})"),
                    (Some(e), _) => e.to_string(),
                    _ => "-".into(),
                },
            ),
        )
        .cut(14, 8)
        .dropped(4),
        Column::fixed("NEXT (UTC)", next(true))
            .or(next(false))
            .cut(25, 14),
        Column::fixed("NEXT (LOCAL)", each(&|p| short(&s(&p["next_local"]), true)))
            .or(each(&|p| short(&s(&p["next_local"]), false)))
            .dropped(0),
        Column::fixed("LAST RUN", last(true))
            .or(last(false))
            .cut(16, 8)
            .dropped(5),
        Column::fixed(
            "ACTIVE",
            each(&|p| match p["max_parallel"].as_u64() {
                Some(n) if n > 1 => format!("{} of {n}", p["active"]),
                _ => p["active"].to_string(),
            }),
        )
        .dropped(3),
        Column::fixed("QUEUED", each(&|p| p["queued"].to_string())).dropped(2),
        Column::fixed("PAUSED", paused(true)).or(paused(false)),
    ];
    let width = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        fit::terminal_width()
    } else {
        usize::MAX
    };
    fit::render(&cols, true, width)
}

/// An RFC 3339 time as the table shows it: `2026-12-01 05:00:00`, and the offset after a space
/// when it is not UTC (`2026-12-01 06:00:00 +01:00`); without `long`, no year
/// (`12-01 05:00:00`).
fn short(rfc: &str, long: bool) -> String {
    let date = if long { "%Y-%m-%d" } else { "%m-%d" };
    match chrono::DateTime::parse_from_rfc3339(rfc) {
        Ok(t) if t.offset().local_minus_utc() == 0 && rfc.ends_with('Z') => {
            t.format(&format!("{date} %H:%M:%S")).to_string()
        }
        Ok(t) => t.format(&format!("{date} %H:%M:%S %:z")).to_string(),
        Err(_) => rfc.to_string(),
    }
}
