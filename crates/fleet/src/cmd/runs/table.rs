//! `fleet runs` for people and for pipes: a table that fits the terminal's width, or plain
//! tab-separated lines when stdout is not a terminal.
//!
//! The table never lets a row wrap onto a second line, at any width (the layout is
//! [`crate::fit`]'s): the start time loses its year, NOTE and names are cut with `…`, then
//! NAMESPACE, ATTEMPT, TRIGGER, EXIT, STARTED, DURATION and NOTE are dropped in that order;
//! below about 40 columns, lines are cut at the edge. The plain form keeps every column and every note whole (tabs and line breaks inside a value
//! become spaces), so `grep`, `cut` and `awk` read it.

use crate::fit::{self, Column};
use store::{rfc3339, Millis, Pauses, Run};

/// The narrowest NOTE the table tries to keep before it drops columns.
const MIN_NOTE: usize = 12;
/// Names longer than this are cut in the table (never in the plain form).
const MAX_NAME: usize = 20;

/// Column names, in the order they appear.
const COLUMNS: [&str; 10] = [
    "ID",
    "PROJECT",
    "NAMESPACE",
    "STATUS",
    "ATTEMPT",
    "TRIGGER",
    "EXIT",
    "STARTED (UTC)",
    "DURATION",
    "NOTE",
];
const STARTED: usize = 7;
const NOTE: usize = 9;

/// One run's cells, full length, in [`COLUMNS`] order. `now` (milliseconds since the epoch,
/// UTC) gives the elapsed time of an active run; `pauses` mark the queued runs they hold.
fn cells(r: &Run, pauses: &Pauses, now: Millis, short_start: bool) -> [String; 10] {
    let exit = match (r.exit_code, r.signal) {
        (Some(c), _) => c.to_string(),
        (None, Some(s)) => format!("sig {s}"),
        _ => String::new(),
    };
    // `checked_sub`: the times are whatever the row holds, another program's too.
    let duration = match (r.started_at, r.finished_at) {
        (Some(s), Some(f)) if f >= s => f.checked_sub(s).map(compact).unwrap_or_default(),
        // Still active: how long it has run so far.
        (Some(s), None) if r.status.is_active() && now >= s => now
            .checked_sub(s)
            .map(|d| format!("{}…", compact(d)))
            .unwrap_or_default(),
        _ => String::new(),
    };
    // Where a run came from and what may reorder it, when it is not the plain default, then
    // what holds it or how it ended; parts joined with "; " so they read apart.
    let held = (r.status == store::RunStatus::Queued)
        .then(|| pauses.holding(&r.project, &r.namespace))
        .flatten()
        .map(|p| format!("paused ({} {})", p.kind, p.name));
    let reason = if r.cancel_requested && r.status.is_active() {
        Some("cancel requested".to_string())
    } else {
        r.reason.clone().filter(|s| !s.trim().is_empty())
    };
    let note = [
        (r.priority != 0).then(|| format!("priority {}", r.priority)),
        r.rerun_of.map(|id| format!("rerun of {id}")),
        r.occurrence.map(|o| format!("occurrence {}", rfc3339(o))),
        held,
        reason,
    ]
    .into_iter()
    .flatten()
    .map(|s| s.trim().to_string())
    .collect::<Vec<_>>()
    .join("; ");
    let started = r
        .started_at
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| {
            let f = if short_start {
                "%m-%d %H:%M:%S"
            } else {
                "%Y-%m-%d %H:%M:%S"
            };
            t.format(f).to_string()
        })
        .unwrap_or_default();
    [
        r.id.to_string(),
        r.project.clone(),
        r.namespace.clone(),
        r.status.to_string(),
        r.attempt.to_string(),
        r.trigger.as_str().to_string(),
        exit,
        started,
        duration,
        flat(note.trim()),
    ]
}

/// A duration in milliseconds, short: `850ms`, `12.3s`, `4m05s`, `2h07m`, `3d04h`.
fn compact(ms: i64) -> String {
    let s = ms / 1000;
    match ms {
        ..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..=86_399_999 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `s` on one line: tabs and line breaks become spaces.
fn flat(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The plain form: a header line (unless `headers` is false), then one line per run, values
/// separated by tabs, nothing cut.
pub fn plain(runs: &[Run], pauses: &Pauses, now: Millis, headers: bool) -> String {
    let mut lines = Vec::with_capacity(runs.len() + 1);
    if headers {
        lines.push(COLUMNS.join("\t"));
    }
    for r in runs {
        lines.push(cells(r, pauses, now, false).join("\t"));
    }
    lines.join("\n")
}

/// The table, at most `width` characters wide with every run on one line (see [`fit`] for how
/// it gives way: the start time loses its year, notes and names are cut, then NAMESPACE,
/// ATTEMPT, TRIGGER, EXIT, STARTED, DURATION and NOTE are dropped in that order). `headers`
/// false leaves the header out and keeps the same columns. No runs at all: `empty` alone.
pub fn table(
    runs: &[Run],
    pauses: &Pauses,
    now: Millis,
    headers: bool,
    width: usize,
    empty: &str,
) -> String {
    if runs.is_empty() {
        return empty.into();
    }
    let rows: Vec<[String; 10]> = runs.iter().map(|r| cells(r, pauses, now, false)).collect();
    let column = |i: usize| -> Vec<String> {
        rows.iter()
            .map(|row| match i {
                1 | 2 => fit::cut(&row[i], MAX_NAME),
                _ => row[i].clone(),
            })
            .collect()
    };
    let short_start: Vec<String> = runs
        .iter()
        .map(|r| cells(r, pauses, now, true)[STARTED].clone())
        .collect();
    let cols = vec![
        Column::fixed(COLUMNS[0], column(0)),
        Column::fixed(COLUMNS[1], column(1)).cut(12, 8),
        Column::fixed(COLUMNS[2], column(2)).cut(12, 8).dropped(0),
        Column::fixed(COLUMNS[3], column(3)),
        Column::fixed(COLUMNS[4], column(4)).dropped(1),
        Column::fixed(COLUMNS[5], column(5)).dropped(2),
        Column::fixed(COLUMNS[6], column(6)).dropped(3),
        Column::fixed(COLUMNS[STARTED], column(STARTED))
            .or(short_start)
            .dropped(4),
        Column::fixed(COLUMNS[8], column(8)).dropped(5),
        Column::fixed(COLUMNS[NOTE], column(NOTE))
            .cut(MIN_NOTE, 4)
            .dropped(6),
    ];
    fit::render(&cols, headers, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_durations() {
        assert_eq!(compact(850), "850ms");
        assert_eq!(compact(12_340), "12.3s");
        assert_eq!(compact(245_000), "4m05s");
        assert_eq!(compact(2 * 3_600_000 + 7 * 60_000), "2h07m");
        assert_eq!(compact(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    }
}
