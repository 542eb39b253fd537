//! Tables for a terminal that never wrap a row: the one layout routine behind `fleet runs` and
//! `fleet projects`.
//!
//! A row that folds onto a second line cannot be read with the eye, nor counted with `wc -l`,
//! so the table gives way step by step until every line fits the width:
//!
//! 1. columns with a shorter form (times without the year) switch to it;
//! 2. cuttable columns (names, notes) are cut with `…`, rightmost first, down to their
//!    comfortable floor;
//! 3. columns are dropped, one at a time, in the order the caller gave;
//! 4. cuttable columns are cut down to their hard floor.
//!
//! The columns the runs and projects tables never drop fit in 40 columns with values of
//! ordinary length (ids, names and statuses of up to eight characters); below that, or with unusually long values, each line is cut at the right edge with `…`: a row is
//! still one line, at any width.
//!
//! Column widths are measured with the header included even when the header is not printed,
//! so `--no-headers` shows exactly the headed table minus its header.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// One column of a table.
pub struct Column {
    /// Its header.
    pub header: &'static str,
    /// Its cells, one per row, in forms from longest to shortest: each form is one cell per
    /// row. The first form is used while it fits; later ones when the table is too wide.
    pub forms: Vec<Vec<String>>,
    /// Terminal columns the column may be cut down to before any column is dropped; `None`: never
    /// cut.
    pub soft_min: Option<usize>,
    /// Terminal columns the column may be cut down to once every droppable column is gone.
    pub hard_min: usize,
    /// When it is dropped, lowest first; `None`: never dropped.
    pub drop: Option<u8>,
}

impl Column {
    /// A column with one form, never cut nor dropped.
    pub fn fixed(header: &'static str, cells: Vec<String>) -> Column {
        Column {
            header,
            forms: vec![cells],
            soft_min: None,
            hard_min: 0,
            drop: None,
        }
    }

    /// This column, droppable at rank `rank` (lowest dropped first).
    pub fn dropped(mut self, rank: u8) -> Column {
        self.drop = Some(rank);
        self
    }

    /// This column, cuttable to `soft` characters before columns are dropped and to `hard`
    /// after.
    pub fn cut(mut self, soft: usize, hard: usize) -> Column {
        self.soft_min = Some(soft);
        self.hard_min = hard.min(soft);
        self
    }

    /// This column with a shorter form of its cells, used when the table is too wide.
    pub fn or(mut self, shorter: Vec<String>) -> Column {
        self.forms.push(shorter);
        self
    }

    fn cells(&self, form: usize) -> &[String] {
        &self.forms[form.min(self.forms.len() - 1)]
    }

    fn natural(&self, form: usize) -> usize {
        self.cells(form)
            .iter()
            .map(|c| len(c))
            .chain([len(self.header)])
            .max()
            .unwrap_or(0)
    }
}

/// The width assumed when a table is asked for and no width is known.
pub const DEFAULT_WIDTH: usize = 80;

/// The width of the terminal tables, in columns: `$COLUMNS` when it is a number from 1 to 65535, else the
/// terminal's when it reports one above 0 (a pseudo-terminal may report 0×0), else
/// [`DEFAULT_WIDTH`] (80). Anything else in `$COLUMNS` (`abc`, `0`, `-5`, a number
/// past 65535) counts as unset.
pub fn terminal_width() -> usize {
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
        .unwrap_or(DEFAULT_WIDTH)
}

/// The columns `s` takes on a terminal: most characters one, East Asian wide ones (CJK, most
/// emoji) two, combining marks none. A note or a path may hold any of them, and a count of
/// characters would let a row of wide ones overflow the width and wrap.
fn len(s: &str) -> usize {
    s.width()
}

/// `s` cut to at most `width` terminal columns, ending in `…` when cut (a wide character that
/// would straddle the edge goes whole).
pub fn cut(s: &str, width: usize) -> String {
    if len(s) <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > width - 1 {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

/// `s` cut to `width` terminal columns and padded with spaces to exactly that many.
fn padded(s: &str, width: usize) -> String {
    let c = cut(s, width);
    let fill = width.saturating_sub(len(&c));
    c + &" ".repeat(fill)
}

/// The width of a table with columns of `widths`: a border on each side, one space of padding
/// on each side of every cell, and one separator between two cells.
fn total(widths: &[usize]) -> usize {
    2 + widths.len().saturating_sub(1) + widths.iter().map(|w| w + 2).sum::<usize>()
}

/// Widths for the columns `shown` (indexes into `cols`) in `form` that fit `width`, cutting
/// cuttable columns (rightmost first) to at most their floor (`soft` or hard); `None` when even
/// that is too wide.
fn fit(
    cols: &[Column],
    shown: &[usize],
    form: usize,
    width: usize,
    soft: bool,
) -> Option<Vec<usize>> {
    let mut widths: Vec<usize> = shown.iter().map(|&i| cols[i].natural(form)).collect();
    let mut excess = total(&widths).saturating_sub(width);
    for (k, &i) in shown.iter().enumerate().rev() {
        if excess == 0 {
            break;
        }
        let floor = match (soft, cols[i].soft_min) {
            (_, None) => continue,
            (true, Some(s)) => s,
            (false, Some(_)) => cols[i].hard_min,
        };
        let give = widths[k].saturating_sub(floor).min(excess);
        widths[k] -= give;
        excess -= give;
    }
    (excess == 0).then_some(widths)
}

/// The table of `cols` (all with the same number of rows), at most `width` terminal columns wide,
/// every row on one line; `headers` false leaves the header line out (the layout stays the
/// same).
pub fn render(cols: &[Column], headers: bool, width: usize) -> String {
    let forms = cols.iter().map(|c| c.forms.len()).max().unwrap_or(1);
    let mut drops: Vec<(u8, usize)> = cols
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.drop.map(|r| (r, i)))
        .collect();
    drops.sort();
    // The layouts tried, widest first: every column in each form, then one column fewer at a
    // time in the shortest form.
    let mut layouts: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut shown: Vec<usize> = (0..cols.len()).collect();
    for form in 0..forms {
        layouts.push((form, shown.clone()));
    }
    for &(_, d) in &drops {
        shown.retain(|&i| i != d);
        layouts.push((forms - 1, shown.clone()));
    }
    let chosen = layouts
        .iter()
        .find_map(|(form, shown)| fit(cols, shown, *form, width, true).map(|w| (*form, shown, w)))
        .or_else(|| {
            let (form, shown) = layouts.last().expect("at least one layout");
            let widths = fit(cols, shown, *form, width, false).unwrap_or_else(|| {
                // Too narrow even then: the hard floors, and lines cut at the edge below.
                shown
                    .iter()
                    .map(|&i| match cols[i].soft_min {
                        Some(_) => cols[i].natural(*form).min(cols[i].hard_min),
                        None => cols[i].natural(*form),
                    })
                    .collect()
            });
            Some((*form, shown, widths))
        });
    let (form, shown, widths) = chosen.expect("a layout is always chosen");
    // Drawn here rather than by comfy-table: every cell is padded to its column's width, which
    // keeps the layout identical with and without the header (comfy-table sizes a column by
    // what it holds).
    let inner = total(&widths) - 2;
    let line = |cells: Vec<String>| {
        let body: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, &w)| padded(c, w))
            .collect();
        format!("│ {} │", body.join("   "))
    };
    let mut out = vec![format!("┌{}┐", "─".repeat(inner))];
    if headers {
        out.push(line(
            shown.iter().map(|&i| cols[i].header.to_string()).collect(),
        ));
        out.push(format!("╞{}╡", "═".repeat(inner)));
    }
    let rows = cols.first().map_or(0, |c| c.cells(form).len());
    for r in 0..rows {
        out.push(line(
            shown
                .iter()
                .map(|&i| cols[i].cells(form)[r].clone())
                .collect(),
        ));
    }
    out.push(format!("└{}┘", "─".repeat(inner)));
    out.iter()
        .map(|l| cut(l, width))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<Column> {
        let names: Vec<String> = (0..n)
            .map(|i| format!("a-project-with-a-long-name-{i}"))
            .collect();
        vec![
            Column::fixed("ID", (0..n).map(|i| (1000 + i).to_string()).collect()),
            Column::fixed("PROJECT", names).cut(12, 6),
            Column::fixed("NAMESPACE", vec!["ops".into(); n]).dropped(0),
            Column::fixed("STARTED", vec!["2026-11-30 08:00:00".into(); n])
                .or(vec!["11-30 08:00:00".into(); n])
                .dropped(1),
            Column::fixed("NOTE", vec!["a note that goes on and on".into(); n])
                .cut(8, 1)
                .dropped(2),
        ]
    }

    #[test]
    fn every_line_fits_at_every_width() {
        for width in 1..=160 {
            let out = render(&sample(3), true, width);
            assert_eq!(out.lines().count(), 3 + 4, "{width}:\n{out}");
            for l in out.lines() {
                assert!(len(l) <= width, "{width}:\n{out}");
            }
        }
    }

    #[test]
    fn no_headers_keeps_the_layout() {
        for width in [30, 50, 80] {
            let with = render(&sample(2), true, width);
            let without = render(&sample(2), false, width);
            let body: Vec<&str> = with.lines().skip(3).collect();
            assert_eq!(without.lines().skip(1).collect::<Vec<_>>(), body, "{width}");
        }
    }

    #[test]
    fn cut_marks_what_it_cuts() {
        assert_eq!(cut("abcdef", 6), "abcdef");
        assert_eq!(cut("abcdefg", 6), "abcde…");
        assert_eq!(cut("abc", 0), "");
    }

    /// Wide characters take two columns: a table of them still fits its width and lines up,
    /// and a cut never leaves half of one.
    #[test]
    fn wide_characters_count_as_two_columns() {
        assert_eq!(len("日本語"), 6);
        assert_eq!(cut("日本語のメモ", 6), "日本…");
        assert_eq!(cut("日本語のメモ", 5), "日本…");
        assert_eq!(cut("日本語のメモ", 4), "日…");
        let notes: Vec<String> = vec!["ディスクがいっぱいです".into(), "ok".into()];
        for width in 20..=60 {
            let cols = vec![
                Column::fixed("ID", vec!["1".into(), "2".into()]),
                Column::fixed("NOTE", notes.clone()).cut(4, 1),
            ];
            let out = render(&cols, true, width);
            let widths: Vec<usize> = out.lines().map(len).collect();
            assert!(widths.iter().all(|&w| w <= width), "{width}:\n{out}");
            assert!(
                widths.iter().all(|&w| w == widths[0]),
                "{width}: ragged\n{out}"
            );
        }
    }
}
