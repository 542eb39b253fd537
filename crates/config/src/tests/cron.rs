//! Cron expressions, through the checker `fleet validate` and the daemon's load share: macros,
//! errors that name the field and its range, and expressions that can never fire.

use chrono::{DateTime, Utc};

use super::{one, path, project};
use crate::schedule::timetable::Timetable;
use crate::{parse_schedule, Config, MACROS};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// Each macro is accepted, in any case, kept as written, and fires exactly as the fields it
/// stands for.
#[test]
fn macros_are_accepted_and_fire_as_their_fields() {
    let from = utc("2025-06-04T10:17:00Z"); // a Wednesday
    let expected = [
        ("@yearly", "2026-01-01T00:00:00Z"),
        ("@annually", "2026-01-01T00:00:00Z"),
        ("@monthly", "2025-07-01T00:00:00Z"),
        ("@weekly", "2025-06-08T00:00:00Z"),
        ("@daily", "2025-06-05T00:00:00Z"),
        ("@midnight", "2025-06-05T00:00:00Z"),
        ("@hourly", "2025-06-04T11:00:00Z"),
    ];
    assert_eq!(
        MACROS.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
        expected.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
        "every macro has its case here"
    );
    for ((name, fields), (_, next)) in MACROS.iter().zip(expected) {
        for written in [name.to_string(), name.to_uppercase()] {
            let c = Config::parse(&project(&format!("schedule = \"{written}\"")), path())
                .unwrap_or_else(|e| panic!("{written}: {e}"));
            assert_eq!(c.project("p").unwrap().schedule.as_deref(), Some(&*written));
            let by_macro = Timetable::new(&written, None).unwrap();
            let by_fields = Timetable::new(fields, None).unwrap();
            assert_eq!(by_macro.next_after(from), Some(utc(next)), "{written}");
            assert_eq!(by_fields.next_after(from), Some(utc(next)), "{fields}");
            assert_eq!(
                by_macro.is_wall_clock(),
                by_fields.is_wall_clock(),
                "{written}"
            );
        }
    }
    let (line, key) = one(
        &project("schedule = \"@reboot\""),
        "unknown macro \"@reboot\"",
    );
    assert_eq!((line, key.as_str()), (3, "projects.p.schedule"));
    one(&project("schedule = \"@reboot\""), "@daily");
    one(&project("schedule = \"@daily 5\""), "unknown macro");
}

/// A value out of range names its field (minute, hour, day of month, month, day of week; second
/// in the 6-field form) and the values the field takes, not just the parser's words.
#[test]
fn errors_name_the_field_and_its_range() {
    let cases = [
        ("61 * * * *", "minute field \"61\"", "minute takes 0-59"),
        ("* 24 * * *", "hour field \"24\"", "hour takes 0-23"),
        (
            "0 0 32 * *",
            "day of month field \"32\"",
            "day of month takes 1-31",
        ),
        (
            "0 0 0 * *",
            "day of month field \"0\"",
            "day of month takes 1-31",
        ),
        (
            "0 0 * 13 *",
            "month field \"13\"",
            "month takes 1-12 or JAN-DEC",
        ),
        (
            "0 0 * * 8",
            "day of week field \"8\"",
            "day of week takes 0-7",
        ),
        ("1-70 * * * *", "minute field \"1-70\"", "minute takes 0-59"),
        ("*/0 * * * *", "minute field \"*/0\"", "minute takes 0-59"),
        ("60 * * * * *", "second field \"60\"", "second takes 0-59"),
        ("0 60 * * * *", "minute field \"60\"", "minute takes 0-59"),
        ("0 0 * * * FOO", "day of week field \"FOO\"", "SUN-SAT"),
    ];
    for (expr, field, range) in cases {
        let (line, key) = one(&project(&format!("schedule = \"{expr}\"")), field);
        assert_eq!((line, key.as_str()), (3, "projects.p.schedule"), "{expr}");
        let e = parse_schedule(expr).unwrap_err();
        assert!(e.contains(range), "{expr}: {e}");
    }
}

/// Day of month and day of week combine as in classic cron: OR when both are restricted, AND
/// when either starts with `*` — `*/2` included, which croner alone reads as restricted.
#[test]
fn day_of_month_and_day_of_week_combine_as_in_classic_cron() {
    let from = utc("2026-12-01T00:00:00Z"); // a Tuesday
    let next = |expr: &str, n: usize| -> Vec<String> {
        let tt = Timetable::new(expr, None).unwrap();
        let mut at = from;
        (0..n)
            .map(|_| {
                at = tt.next_after(at).unwrap();
                at.format("%Y-%m-%d %a").to_string()
            })
            .collect()
    };
    // Odd-numbered Fridays only (cronie), not every odd day and every Friday.
    assert_eq!(
        next("0 0 */2 * 5", 3),
        ["2026-12-11 Fri", "2026-12-25 Fri", "2027-01-01 Fri"]
    );
    // A restricted day of month with `*/1` weekdays: the day of month decides.
    assert_eq!(
        next("0 0 13 * */1", 2),
        ["2026-12-13 Sun", "2027-01-13 Wed"]
    );
    // Both restricted: either.
    assert_eq!(
        next("0 0 1 * MON", 3),
        ["2026-12-07 Mon", "2026-12-14 Mon", "2026-12-21 Mon"]
    );
    assert_eq!(
        next("0 0 10 * MON", 2),
        ["2026-12-07 Mon", "2026-12-10 Thu"]
    );
    // A bare `*` on either side, as before.
    assert_eq!(next("0 0 * * FRI", 1), ["2026-12-04 Fri"]);
    assert_eq!(next("0 0 25 12 *", 1), ["2026-12-25 Fri"]);
    // The Quartz forms CONFIG.md lists.
    assert_eq!(next("0 0 L * ?", 2), ["2026-12-31 Thu", "2027-01-31 Sun"]);
    assert_eq!(next("0 0 ? * 5L", 2), ["2026-12-25 Fri", "2027-01-29 Fri"]);
    assert_eq!(next("0 0 ? * FRIL", 1), ["2026-12-25 Fri"]);
    assert_eq!(next("0 0 13W * ?", 2), ["2026-12-14 Mon", "2027-01-13 Wed"]);
    assert_eq!(next("0 0 LW * ?", 1), ["2026-12-31 Thu"]);
    assert_eq!(
        next("0 0 ? * MON#2", 2),
        ["2026-12-14 Mon", "2027-01-11 Mon"]
    );
    // A bare `L` among the weekdays names none (croner would match no day with it): refused.
    for expr in ["0 0 1 * L", "0 0 * * l", "0 0 5 * MON,L"] {
        let (line, key) = one(
            &project(&format!("schedule = \"{expr}\"")),
            "a bare L names no weekday",
        );
        assert_eq!((line, key.as_str()), (3, "projects.p.schedule"), "{expr}");
    }
}

/// An expression no date ever matches is refused (croner alone accepts it, and it would never
/// fire); rare but real dates are accepted.
#[test]
fn a_schedule_that_never_fires_is_refused() {
    for expr in [
        "0 0 31 2 *",
        "0 0 30 2 *",
        "0 0 30,31 2 *",
        "0 0 31 4,6,9,11 *",
        "0 0 0 31 2 *",
        "0 0 31 2 +MON",
    ] {
        let (line, key) = one(&project(&format!("schedule = \"{expr}\"")), "never fires");
        assert_eq!((line, key.as_str()), (3, "projects.p.schedule"), "{expr}");
    }
    // February 29th (every fourth year), or a Monday falling on it (every 28 years or so), or
    // the fifth Monday of a February: rare, but they happen.
    for expr in ["0 0 29 2 *", "0 0 29 2 +MON", "0 0 * 2 MON#5", "0 0 31 * *"] {
        Config::parse(&project(&format!("schedule = \"{expr}\"")), path())
            .unwrap_or_else(|e| panic!("{expr}: {e}"));
    }
}

/// The macros and docs/CONFIG.md agree: every macro is documented beside the fields it stands
/// for, and the doc names no macro fleet does not accept.
#[test]
fn macros_register_matches_docs_config_md() {
    let doc = std::fs::read_to_string(super::docs_path()).unwrap();
    let rows: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with('|') && l.contains("`@"))
        .collect();
    for (name, fields) in MACROS {
        assert!(
            rows.iter()
                .any(|r| r.contains(&format!("`{name}`")) && r.contains(&format!("`{fields}`"))),
            "docs/CONFIG.md does not document {name} as {fields}"
        );
    }
    for row in rows {
        for part in row.split('`').filter(|p| p.starts_with('@')) {
            assert!(
                MACROS.iter().any(|(m, _)| m == &part),
                "docs/CONFIG.md documents {part}, which fleet does not accept"
            );
        }
    }
}
