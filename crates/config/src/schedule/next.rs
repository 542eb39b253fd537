//! The next occurrence of a project's schedule as the daemon will see it, for `fleet projects`:
//! computed from the persisted cursor with the daemon's own [`Timetable`], never from a second
//! implementation.

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use store::{Millis, ScheduleRow};

use super::timetable::{timetable_key, Timetable};
use crate::ProjectConfig;

/// A project's next occurrence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextOccurrence {
    /// The instant, UTC, whole seconds.
    pub at: DateTime<Utc>,
    /// The same instant in the schedule's time zone, RFC 3339 with its offset.
    pub local: String,
    /// The occurrence is not later than now: it is due (no daemon has handled it yet; one that
    /// runs handles it at its next EVAL, by the missed-occurrence rules).
    pub due: bool,
}

/// The next occurrence of `project`'s schedule at `now` (milliseconds since the Unix epoch,
/// UTC): the first after the persisted cursor in `row` when that cursor belongs to the same
/// timetable (and the clock has not stepped back behind it), else the first after `now`, as for
/// a schedule the daemon has not started yet. `None` without a schedule, or when the timetable
/// never matches again.
pub fn next_occurrence(
    project: &ProjectConfig,
    row: Option<&ScheduleRow>,
    now: Millis,
) -> Option<NextOccurrence> {
    let expr = project.schedule.as_deref()?;
    let timezone = project.timezone.as_deref();
    // Validated at load; a failure here is a bug, shown as "no next occurrence".
    let timetable = Timetable::new(expr, timezone).ok()?;
    let tz: Tz = timezone.unwrap_or("UTC").parse().ok()?;
    let key = timetable_key(expr, timezone);
    let from = row
        .filter(|r| r.timetable == key && !crate::clock::ahead_of_clock(r.cursor, now))
        .map_or(now, |r| r.cursor);
    let at = timetable.next_after(DateTime::from_timestamp_millis(from)?)?;
    Some(NextOccurrence {
        at,
        local: at
            .with_timezone(&tz)
            .to_rfc3339_opts(SecondsFormat::Secs, true),
        due: at.timestamp_millis() <= now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(schedule: &str, timezone: Option<&str>) -> ProjectConfig {
        let text = format!(
            "[projects.p]\ncommand = [\"true\"]\nschedule = {schedule:?}\n{}",
            timezone.map_or(String::new(), |t| format!("timezone = {t:?}\n"))
        );
        let config = crate::Config::parse(&text, std::path::Path::new("fleet.toml")).unwrap();
        config.projects["p"].clone()
    }

    fn ms(s: &str) -> Millis {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn from_the_cursor_when_it_belongs_to_the_timetable() {
        let p = project("0 6 * * *", Some("Europe/Paris"));
        let row = ScheduleRow {
            project: "p".into(),
            timetable: timetable_key("0 6 * * *", Some("Europe/Paris")),
            cursor: ms("2026-11-29T05:00:00Z"),
            next_fire: None,
            skipped_total: 0,
            last_skipped: None,
            clock_back: None,
        };
        let now = ms("2026-11-29T12:00:00Z");
        let next = next_occurrence(&p, Some(&row), now).unwrap();
        assert_eq!(next.at.timestamp_millis(), ms("2026-11-30T05:00:00Z"));
        assert_eq!(next.local, "2026-11-30T06:00:00+01:00");
        assert!(!next.due);
        // A cursor two days old: the next one after it is already due.
        let old = ScheduleRow {
            cursor: ms("2026-11-27T05:00:00Z"),
            ..row.clone()
        };
        assert!(next_occurrence(&p, Some(&old), now).unwrap().due);
        // Another timetable's cursor does not count: from now.
        let other = ScheduleRow {
            timetable: "x".into(),
            ..old
        };
        assert!(!next_occurrence(&p, Some(&other), now).unwrap().due);
        assert!(next_occurrence(&project("0 6 * * *", None), None, now).is_some());
    }
}
