//! Cron expressions as fleet.toml accepts them (`projects.<name>.schedule`), parsed by croner.
//!
//! One function, [`parse_schedule`], shared by `fleet validate`, the daemon's load and the
//! schedule timetable, so that what validation accepts is exactly what fires. It adds three
//! things to croner's parser: the macros (`@daily`, …) expanded from one table ([`MACROS`]);
//! errors that name the field at fault and its range (croner's own say "Number out of bounds"
//! and nothing more); and the refusal of an expression that can never fire (`0 0 31 2 *`),
//! which croner accepts.

use chrono::TimeZone;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// The macros accepted in place of the fields, and the five fields each stands for.
pub const MACROS: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// The five fields of the short form, in order: (name, accepted values).
const FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day of month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day of week", "0-7 (0 and 7 are Sunday) or SUN-SAT"),
];

/// The field that leads the long form.
const SECOND: (&str, &str) = ("second", "0-59");

/// Parses a cron expression the way fleet.toml accepts it: 5 fields (minute hour day-of-month
/// month day-of-week), or 6 with seconds first, or one of the [`MACROS`]. Day-of-month and
/// day-of-week combine as in classic cron: with OR when both are restricted, with AND when
/// either starts with `*` (`0 0 */2 * 5`: odd-numbered days that are Fridays).
///
/// # Errors
///
/// A human-readable reason: the field count is wrong; an unknown macro; a field does not
/// parse (the message names the field and the values it takes); or no date ever matches the
/// expression (day of month, month and day of week that never meet, such as February 31), so
/// that it would never fire.
pub fn parse_schedule(expr: &str) -> Result<Cron, String> {
    let text = expand_macro(expr)?;
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() != 5 && fields.len() != 6 {
        return Err(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds \
             first, or a macro such as @daily, found {}",
            fields.len()
        ));
    }
    // Classic cron (Vixie's, cronie's): day of month and day of week combine with OR only when
    // both are restricted; a field that starts with `*` (`*`, `*/2`) leaves the other alone to
    // decide (AND). croner takes only a bare `*` that way, so `0 0 */2 * 5` fired on every
    // odd day and every Friday, where cron fires on odd-numbered Fridays.
    let dom = fields[fields.len() - 3];
    let dow = fields[fields.len() - 1];
    let classic_and = dom.starts_with('*') || dow.starts_with('*');
    // croner takes a bare `L` among the weekdays for a last-of-something with no weekday, which
    // matches no day; Quartz reads it as Saturday. Neither is what a reader of the file would
    // guess: refused, naming what to write.
    if dow.split(',').any(|part| part.eq_ignore_ascii_case("L")) {
        return Err(format!(
            "day of week field {dow:?} is invalid (a bare L names no weekday); write SAT for \
             every Saturday, or a weekday before it, such as 5L or FRIL, for the last Friday of \
             the month"
        ));
    }
    let cron = parser(classic_and)
        .parse(&text)
        .map_err(|e| field_error(&fields, &e))?;
    never_fires(&cron, &fields)?;
    Ok(cron)
}

/// croner's parser as fleet uses it: seconds optional, no year field; day of month and day of
/// week both required of a day when `dom_and_dow` (see [`parse_schedule`]).
fn parser(dom_and_dow: bool) -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .dom_and_dow(dom_and_dow)
        .build()
}

/// `expr` with a macro replaced by its fields; anything else as it is.
fn expand_macro(expr: &str) -> Result<String, String> {
    let trimmed = expr.trim();
    if !trimmed.starts_with('@') {
        return Ok(trimmed.to_string());
    }
    MACROS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(trimmed))
        .map(|(_, fields)| (*fields).to_string())
        .ok_or_else(|| {
            let names: Vec<&str> = MACROS.iter().map(|(name, _)| *name).collect();
            format!(
                "unknown macro {trimmed:?}; expected one of {}",
                names.join(", ")
            )
        })
}

/// The names and ranges of `fields`, in order (5 or 6 of them).
fn names(fields: &[&str]) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::with_capacity(6);
    if fields.len() == 6 {
        out.push(SECOND);
    }
    out.extend(FIELDS);
    out
}

/// croner's error for `fields`, with the field at fault and its range: each field is tried
/// alone, the others `*`, and the first that fails is named. Falls back to croner's words
/// alone when no single field fails.
fn field_error(fields: &[&str], err: &croner::errors::CronError) -> String {
    let named = names(fields);
    for (i, field) in fields.iter().enumerate() {
        let probe: Vec<&str> = (0..fields.len())
            .map(|j| if j == i { *field } else { "*" })
            .collect();
        if let Err(e) = parser(false).parse(&probe.join(" ")) {
            let (name, range) = named[i];
            return format!(
                "{name} field {field:?} is invalid ({}); {name} takes {range}",
                plain(&e)
            );
        }
    }
    plain(err)
}

/// croner's message without its category prefix and final period: `number out of bounds`.
fn plain(err: &croner::errors::CronError) -> String {
    let text = err.to_string();
    let text = [
        "Component error: ",
        "Invalid pattern: ",
        "Pattern contains illegal characters: ",
    ]
    .iter()
    .find_map(|p| text.strip_prefix(p))
    .unwrap_or(&text)
    .trim_start_matches("CronPattern ")
    .trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Refuses an expression no date ever matches. The calendar repeats every 400 years (dates and
/// weekdays alike), and croner searches further than that, so one search from a fixed instant
/// answers for every date to come; a fixed instant keeps the answer free of the clock.
fn never_fires(cron: &Cron, fields: &[&str]) -> Result<(), String> {
    let Some(from) = chrono::Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single() else {
        return Ok(());
    };
    match cron.find_next_occurrence(&from, false) {
        Ok(_) => Ok(()),
        Err(_) => {
            let n = fields.len();
            Err(format!(
                "never fires: no date matches day of month {:?}, month {:?} and day of week {:?} \
                 together",
                fields[n - 3],
                fields[n - 2],
                fields[n - 1]
            ))
        }
    }
}
