//! `fleet runs` for people and for pipes: a table that fits the terminal's width, or plain
//! tab-separated lines when stdout is not a terminal.
//!
//! The table never lets a row wrap onto a second line: it first drops the columns a narrow
//! terminal can do without (NAMESPACE, ATTEMPT, TRIGGER, EXIT, in that order), shortens the
//! start time, then gives NOTE what is left and cuts it (and over-long names) with `…`. The
//! plain form keeps every column and every note whole (tabs and line breaks inside a value
//! become spaces), so `grep`, `cut` and `awk` read it.

use comfy_table::{presets::UTF8_BORDERS_ONLY, ContentArrangement, Table};
use store::{rfc3339, Millis, Pauses, Run};

/// The narrowest NOTE the table tries to keep before it drops columns.
const MIN_NOTE: usize = 12;
/// Names longer than this are cut in the table (never in the plain form).
const MAX_NAME: usize = 20;
/// The width assumed when the table is asked for and no width is known.
pub const DEFAULT_WIDTH: usize = 80;

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
/// Indexes into [`COLUMNS`] of the columns dropped, first to last, when the table is too wide.
const DROP_ORDER: [usize; 4] = [2, 4, 5, 6];
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
    let duration = match (r.started_at, r.finished_at) {
        (Some(s), Some(f)) if f >= s => compact(f - s),
        // Still active: how long it has run so far.
        (Some(s), None) if r.status.is_active() && now >= s => format!("{}…", compact(now - s)),
        _ => String::new(),
    };
    let mut note = r.reason.clone().unwrap_or_default();
    if r.cancel_requested && r.status.is_active() {
        note = "cancel requested".into();
    }
    if r.status == store::RunStatus::Queued {
        if let Some(p) = pauses.holding(&r.project, &r.namespace) {
            note = format!("paused ({} {}) {note}", p.kind, p.name);
        }
    }
    if let Some(o) = r.occurrence {
        note = format!("occurrence {} {note}", rfc3339(o));
    }
    // Where a run came from and what may reorder it, when it is not the plain default.
    let origin = [
        (r.priority != 0).then(|| format!("priority {}", r.priority)),
        r.rerun_of.map(|id| format!("rerun of {id}")),
    ];
    for part in origin.into_iter().flatten().rev() {
        note = format!("{part} {}", note.trim());
    }
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

/// `s` cut to at most `width` characters, ending in `…` when cut.
fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
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

/// The table, at most `width` characters wide (below about 60 columns, where even the columns
/// that are never dropped do not fit, a row may still wrap). `headers` false leaves the header out.
pub fn table(runs: &[Run], pauses: &Pauses, now: Millis, headers: bool, width: usize) -> String {
    if runs.is_empty() {
        return "no runs".into();
    }
    let mut short_start = false;
    let mut rows: Vec<[String; 10]> = runs
        .iter()
        .map(|r| cells(r, pauses, now, short_start))
        .collect();
    for row in &mut rows {
        row[1] = cut(&row[1], MAX_NAME);
        row[2] = cut(&row[2], MAX_NAME);
    }
    let col_width = |rows: &[[String; 10]], i: usize| {
        let head = if headers {
            COLUMNS[i].chars().count()
        } else {
            0
        };
        rows.iter()
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
            .max(head)
    };
    // A border character on each side, one space of padding on each side of every column, and
    // one separator character between two columns.
    let total = |shown: &[usize], rows: &[[String; 10]], note: usize| {
        2 + shown.len().saturating_sub(1)
            + shown
                .iter()
                .map(|&i| if i == NOTE { note } else { col_width(rows, i) } + 2)
                .sum::<usize>()
    };
    let mut shown: Vec<usize> = (0..COLUMNS.len()).collect();
    let note_wanted = col_width(&rows, NOTE);
    let mut drops = DROP_ORDER.iter();
    while total(&shown, &rows, note_wanted.min(MIN_NOTE)) > width {
        if !short_start {
            short_start = true;
            rows = runs
                .iter()
                .zip(rows)
                .map(|(r, old)| {
                    let mut row = old;
                    row[STARTED] = cells(r, pauses, now, true)[STARTED].clone();
                    row
                })
                .collect();
            continue;
        }
        match drops.next() {
            Some(&d) => shown.retain(|&i| i != d),
            None => break,
        }
    }
    // Still too wide with a one-character NOTE: names give way, down to eight characters.
    let excess = total(&shown, &rows, MIN_NOTE.min(note_wanted)).saturating_sub(width);
    if excess > 0 {
        let name = col_width(&rows, 1).saturating_sub(excess).max(8);
        for row in &mut rows {
            row[1] = cut(&row[1], name);
        }
    }
    let rest = total(&shown, &rows, 0);
    let note_width = width.saturating_sub(rest).min(note_wanted).max(1);
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t.set_width(width.min(u16::MAX as usize) as u16);
    if headers {
        t.set_header(shown.iter().map(|&i| {
            if i == NOTE {
                cut(COLUMNS[i], note_width)
            } else {
                COLUMNS[i].to_string()
            }
        }));
    }
    for row in &rows {
        t.add_row(shown.iter().map(|&i| {
            if i == NOTE {
                cut(&row[i], note_width)
            } else {
                row[i].clone()
            }
        }));
    }
    t.to_string()
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

    #[test]
    fn cut_marks_what_it_cuts() {
        assert_eq!(cut("abcdef", 6), "abcdef");
        assert_eq!(cut("abcdefg", 6), "abcde…");
        assert_eq!(cut("abc", 0), "");
    }
}
