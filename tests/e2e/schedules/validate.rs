//! Cron expressions through `fleet validate` and the daemon's load, which share one checker:
//! the macros are accepted and fire; a value out of range names its field and the values it
//! takes; an expression that can never fire is refused.

use super::arming::*;
use super::runs::*;
use crate::common::*;

fn with_schedule(expr: &str) -> String {
    format!("{HEADER}[projects.job]\ncommand = [\"true\"]\nschedule = \"{expr}\"\n")
}

/// `fleet validate` on a config whose only schedule is `expr`: (exit code, stderr + stdout).
fn validate(expr: &str) -> (Option<i32>, String) {
    let f = Fleet::new(&with_schedule(expr));
    let out = f.cmd(&["validate"]);
    (out.code(), format!("{}{}", out.stderr, out.stdout))
}

#[test]
fn macros_are_accepted() {
    for expr in [
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "@Daily",
    ] {
        let (code, out) = validate(expr);
        assert_eq!(code, Some(0), "{expr}: {out}");
    }
    let (code, out) = validate("@reboot");
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains("projects.job.schedule") && out.contains("unknown macro \"@reboot\""),
        "{out}"
    );
}

/// A macro schedule runs in the daemon: `@hourly` is due at the next whole hour, which the
/// daemon persists as the schedule's next occurrence.
#[test]
fn a_macro_schedule_is_armed_by_the_daemon() {
    let f = Fleet::new(&with_schedule("@hourly"));
    let _d = f.start_daemon();
    let mut row = None;
    f.wait_until(DEADLINE, "the daemon to persist the schedule", || {
        row = schedule_row(&f, "job");
        row.is_some()
    });
    let (_, next) = row.unwrap();
    let next = next.expect("a next occurrence");
    assert_eq!(next % 3_600_000, 0, "not a whole hour: {next}");
    assert!(next > now_ms() && next <= now_ms() + 3_600_000, "{next}");
    assert!(runs_of(&f, "job").is_empty());
}

#[test]
fn errors_name_the_field_and_its_range() {
    for (expr, field, range) in [
        ("61 * * * *", "minute field \"61\"", "0-59"),
        ("0 24 * * *", "hour field \"24\"", "0-23"),
        ("0 0 32 * *", "day of month field \"32\"", "1-31"),
        ("0 0 1 13 *", "month field \"13\"", "1-12"),
        ("0 0 * * 9", "day of week field \"9\"", "0-7"),
        ("60 0 0 * * *", "second field \"60\"", "0-59"),
    ] {
        let (code, out) = validate(expr);
        assert_ne!(code, Some(0), "{expr}: {out}");
        let line = out
            .lines()
            .find(|l| l.contains("projects.job.schedule"))
            .unwrap_or_else(|| panic!("{expr}: no error for the key: {out}"));
        assert!(line.contains(":4: "), "{expr}: the line number: {line}");
        assert!(
            line.contains(field) && line.contains(range),
            "{expr}: the error does not name the field and its range: {line}"
        );
    }
}

/// `0 0 31 2 *` (February 31st) never fires: refused by `fleet validate`, and by the daemon,
/// which does not start on it.
#[test]
fn a_schedule_that_never_fires_is_refused() {
    for expr in ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
        let (code, out) = validate(expr);
        assert_ne!(code, Some(0), "{expr}: {out}");
        assert!(
            out.contains("projects.job.schedule") && out.contains("never fires"),
            "{expr}: {out}"
        );
    }
    let f = Fleet::new(&with_schedule("0 0 31 2 *"));
    let out = f.cmd(&["daemon"]);
    assert_ne!(
        out.code(),
        Some(0),
        "the daemon started on it: {}",
        out.stderr
    );
    assert!(out.stderr.contains("never fires"), "{}", out.stderr);
    // February 29th is rare, not never.
    let (code, out) = validate("0 0 29 2 *");
    assert_eq!(code, Some(0), "{out}");
}
