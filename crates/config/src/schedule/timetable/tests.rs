//! Tests of the timetable: DST as classic cron keeps it, catch-up after a gap, clock steps,
//! deadlines. The "clock" is just the `now` passed in. The comparison with a brute-force oracle,
//! and the property tests, are in [`oracle`]; a clock that steps back is in [`clock`].

use super::*;
use chrono::{Offset, Timelike};
use proptest::prelude::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("bad test instant {s:?}: {e}"))
        .with_timezone(&Utc)
}

fn secs(n: i64) -> TimeDelta {
    TimeDelta::seconds(n)
}

fn mins(n: i64) -> TimeDelta {
    TimeDelta::minutes(n)
}

fn tt(expr: &str, tz: Option<&str>) -> Timetable {
    Timetable::new(expr, tz).unwrap_or_else(|e| panic!("{expr:?} {tz:?}: {e}"))
}

/// Every occurrence in `(from, to]`, by iterating `next_after`.
fn occurrences(tt: &Timetable, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut cur = from;
    while let Some(n) = tt.next_after(cur).filter(|n| *n <= to) {
        out.push(n);
        cur = n;
    }
    out
}

/// A daemon that evaluates every `tick` from `from` to `to`, starting with no cursor, feeding
/// each cursor back. Returns what fired.
fn simulate(
    tt: &Timetable,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    tick: TimeDelta,
    deadline: Option<Duration>,
) -> Vec<DateTime<Utc>> {
    let mut cursor = None;
    let mut fired = Vec::new();
    let mut now = from;
    while now <= to {
        let d = due(tt, cursor, now, deadline);
        fired.extend(d.fire);
        cursor = Some(d.cursor);
        now += tick;
    }
    fired
}

fn local_hm(tt: &Timetable, t: DateTime<Utc>) -> (u32, u32) {
    let l = t.with_timezone(&tt.timezone());
    (l.hour(), l.minute())
}

fn offset_secs(tz: Tz, t: DateTime<Utc>) -> i32 {
    tz.offset_from_utc_datetime(&t.naive_utc())
        .fix()
        .local_minus_utc()
}

const FIVE_MIN: Option<Duration> = Some(Duration::from_secs(300));

// ---- Timetable::new ----

#[test]
fn new_rejects_bad_expressions_and_zones() {
    assert!(Timetable::new("61 * * * *", None).is_err());
    assert!(Timetable::new("* * * *", None).is_err());
    let e = Timetable::new("* * * * *", Some("Mars/Olympus_Mons")).unwrap_err();
    assert!(e.contains("Mars/Olympus_Mons"), "{e}");
    assert_eq!(tt("* * * * *", None).timezone(), Tz::UTC);
    assert_eq!(
        tt("* * * * *", Some("Europe/Paris")).timezone(),
        Tz::Europe__Paris
    );
}

#[test]
fn job_kinds_follow_cronie() {
    for wall in [
        "30 1 * * *",
        "0 2,14 * * *",
        "0 9-17 * * 1-5",
        "15 30 1 * * *",
        "0-59/10 1 * * *",
    ] {
        assert!(tt(wall, None).is_wall_clock(), "{wall}");
    }
    for interval in [
        "* * * * *",
        "*/15 * * * *",
        "0 * * * *",
        "0 */2 * * *",
        "*/2 * * * * *",
        "* 30 1 * * *",
    ] {
        assert!(!tt(interval, None).is_wall_clock(), "{interval}");
    }
}

// ---- DST: required cases ----

#[test]
fn new_york_fall_back_daily_0130_fires_once() {
    // 2026-11-01: EDT (UTC-4) until 06:00Z, then EST (UTC-5); 01:30 local happens at 05:30Z
    // and again at 06:30Z.
    let t = tt("30 1 * * *", Some("America/New_York"));
    let expected = vec![
        utc("2026-10-30T05:30:00Z"),
        utc("2026-10-31T05:30:00Z"),
        utc("2026-11-01T05:30:00Z"),
        utc("2026-11-02T06:30:00Z"),
        utc("2026-11-03T06:30:00Z"),
    ];
    let occ = occurrences(&t, utc("2026-10-29T12:00:00Z"), utc("2026-11-03T12:00:00Z"));
    assert_eq!(occ, expected);
    for o in &occ {
        assert_eq!(local_hm(&t, *o), (1, 30), "{o}");
    }

    // A daemon evaluating every minute fires each once, and nothing at the second 01:30.
    let fired = simulate(
        &t,
        utc("2026-10-29T12:00:00Z"),
        utc("2026-11-03T12:00:00Z"),
        mins(1),
        FIVE_MIN,
    );
    assert_eq!(fired, expected);
    let on_the_night: Vec<_> = fired
        .iter()
        .filter(|f| f.with_timezone(&t.timezone()).date_naive().to_string() == "2026-11-01")
        .collect();
    assert_eq!(on_the_night, vec![&utc("2026-11-01T05:30:00Z")]);

    // Asked from inside the repeated hour (second half), the next one is the next day's.
    assert_eq!(
        t.next_after(utc("2026-11-01T06:10:00Z")),
        Some(utc("2026-11-02T06:30:00Z"))
    );
    // ... and from its first half, too (01:30 EDT already passed at 05:30Z).
    assert_eq!(
        t.next_after(utc("2026-11-01T05:45:00Z")),
        Some(utc("2026-11-02T06:30:00Z"))
    );
    // The cursor after the fired one, evaluated right at the second 01:30: nothing.
    let d = due(
        &t,
        Some(utc("2026-11-01T05:30:00Z")),
        utc("2026-11-01T06:30:00Z"),
        FIVE_MIN,
    );
    assert_eq!(d.fire, None);
    assert_eq!(d.next, Some(utc("2026-11-02T06:30:00Z")));
}

#[test]
fn pacific_spring_forward_daily_0200_fires_at_0300_pdt() {
    // 2025-03-09: PST (UTC-8) until 10:00Z, when 02:00 local becomes 03:00 PDT (UTC-7).
    let t = tt("0 2 * * *", Some("US/Pacific"));
    let expected = vec![
        utc("2025-03-07T10:00:00Z"),
        utc("2025-03-08T10:00:00Z"),
        utc("2025-03-09T10:00:00Z"),
        utc("2025-03-10T09:00:00Z"),
        utc("2025-03-11T09:00:00Z"),
    ];
    let from = utc("2025-03-06T12:00:00Z");
    let to = utc("2025-03-11T12:00:00Z");
    assert_eq!(occurrences(&t, from, to), expected);
    assert_eq!(local_hm(&t, expected[2]), (3, 0), "03:00 PDT");
    assert_eq!(offset_secs(t.timezone(), expected[2]), -7 * 3600);
    for o in [expected[0], expected[1], expected[3], expected[4]] {
        assert_eq!(local_hm(&t, o), (2, 0), "{o}");
    }
    assert_eq!(simulate(&t, from, to, mins(1), FIVE_MIN), expected);
}

#[test]
fn utc_schedule_ignores_every_local_dst() {
    for zone in [None, Some("UTC")] {
        let t = tt("0 2 * * *", zone);
        for (from, to) in [
            ("2025-03-06T00:00:00Z", "2025-03-12T00:00:00Z"),
            ("2025-03-27T00:00:00Z", "2025-04-02T00:00:00Z"),
            ("2026-10-29T00:00:00Z", "2026-11-04T00:00:00Z"),
        ] {
            let occ = occurrences(&t, utc(from), utc(to));
            assert_eq!(occ.len(), 6, "{zone:?} {from}");
            for pair in occ.windows(2) {
                assert_eq!(pair[1] - pair[0], TimeDelta::hours(24), "{zone:?} {pair:?}");
            }
            for o in &occ {
                assert_eq!((o.hour(), o.minute(), o.second()), (2, 0, 0));
            }
        }
    }
}

// ---- DST: the rest of the classic-cron rules ----

#[test]
fn listed_hours_are_wall_clock_jobs_too() {
    // croner alone treats `1,13` as an interval job; cronie (and we) do not.
    let ny = tt("30 1,13 * * *", Some("America/New_York"));
    assert_eq!(
        occurrences(
            &ny,
            utc("2026-11-01T00:00:00Z"),
            utc("2026-11-01T23:59:59Z")
        ),
        vec![utc("2026-11-01T05:30:00Z"), utc("2026-11-01T18:30:00Z")]
    );
    let la = tt("0 2,14 * * *", Some("US/Pacific"));
    assert_eq!(
        occurrences(
            &la,
            utc("2025-03-09T08:00:00Z"),
            utc("2025-03-10T08:00:00Z")
        ),
        vec![utc("2025-03-09T10:00:00Z"), utc("2025-03-09T21:00:00Z")]
    );
}

#[test]
fn several_times_in_one_gap_give_one_run_right_after_it() {
    let t = tt("0,30 2 * * *", Some("US/Pacific"));
    let occ = occurrences(&t, utc("2025-03-08T12:00:00Z"), utc("2025-03-10T12:00:00Z"));
    let expected = vec![
        utc("2025-03-09T10:00:00Z"),
        utc("2025-03-10T09:00:00Z"),
        utc("2025-03-10T09:30:00Z"),
    ];
    assert_eq!(occ, expected);
}

#[test]
fn interval_jobs_run_on_real_time_through_dst() {
    // Hourly in New York on the fall-back night: every real hour, both 01:00s included.
    let hourly = tt("0 * * * *", Some("America/New_York"));
    assert_eq!(
        occurrences(
            &hourly,
            utc("2026-11-01T04:30:00Z"),
            utc("2026-11-01T07:30:00Z")
        ),
        vec![
            utc("2026-11-01T05:00:00Z"),
            utc("2026-11-01T06:00:00Z"),
            utc("2026-11-01T07:00:00Z"),
        ]
    );
    // Every minute of hour 2 in Los Angeles: that hour does not exist on 2025-03-09.
    let in_two = tt("* 2 * * *", Some("US/Pacific"));
    let day = occurrences(
        &in_two,
        utc("2025-03-09T08:00:00Z"),
        utc("2025-03-10T08:00:00Z"),
    );
    assert!(day.is_empty(), "{day:?}");
    assert_eq!(
        in_two.next_after(utc("2025-03-09T08:00:00Z")),
        Some(utc("2025-03-10T09:00:00Z"))
    );
}

#[test]
fn a_gap_at_midnight_and_a_skipped_day() {
    // Havana jumps from 00:00 to 01:00 on 2025-03-09 (UTC-5 -> UTC-4).
    let t = tt("0 0 * * *", Some("America/Havana"));
    assert_eq!(
        occurrences(&t, utc("2025-03-08T12:00:00Z"), utc("2025-03-10T12:00:00Z")),
        vec![utc("2025-03-09T05:00:00Z"), utc("2025-03-10T04:00:00Z")]
    );
    // Samoa skipped 2011-12-30 entirely: its 01:30 runs right after the jump, at 00:00 on the
    // 31st, and the 31st's own 01:30 runs too.
    let apia = tt("30 1 * * *", Some("Pacific/Apia"));
    let occ = occurrences(
        &apia,
        utc("2011-12-28T00:00:00Z"),
        utc("2011-12-31T00:00:00Z"),
    );
    let local: Vec<String> = occ
        .iter()
        .map(|o| o.with_timezone(&apia.timezone()).naive_local().to_string())
        .collect();
    assert_eq!(
        local,
        vec![
            "2011-12-28 01:30:00",
            "2011-12-29 01:30:00",
            "2011-12-31 00:00:00",
            "2011-12-31 01:30:00"
        ]
    );
}

// ---- The cursor: next from the last handled, never from now ----

#[test]
fn a_new_schedule_starts_at_now_and_fires_nothing_for_the_past() {
    let t = tt("0 * * * *", None);
    let now = utc("2025-06-01T10:00:00.250Z");
    let d = due(&t, None, now, None);
    assert_eq!(d.fire, None);
    assert!(d.skipped.is_empty());
    assert_eq!(
        d.cursor,
        utc("2025-06-01T10:00:00Z"),
        "rounded down to the second"
    );
    assert_eq!(d.next, Some(utc("2025-06-01T11:00:00Z")));
    // Exactly on an occurrence: still nothing for it.
    let d = due(&t, None, utc("2025-06-01T10:00:00Z"), None);
    assert_eq!((d.fire, d.next), (None, Some(utc("2025-06-01T11:00:00Z"))));
}

#[test]
fn the_same_now_twice_fires_once() {
    let t = tt("0 * * * *", None);
    let now = utc("2025-06-01T11:00:03Z");
    let first = due(&t, Some(utc("2025-06-01T10:00:00Z")), now, FIVE_MIN);
    assert_eq!(first.fire, Some(utc("2025-06-01T11:00:00Z")));
    assert_eq!(first.cursor, utc("2025-06-01T11:00:00Z"));
    assert_eq!(first.next, Some(utc("2025-06-01T12:00:00Z")));
    let second = due(&t, Some(first.cursor), now, FIVE_MIN);
    assert_eq!(second.fire, None);
    assert_eq!(second.cursor, first.cursor);
    assert_eq!(second.next, first.next);
}

#[test]
fn a_clock_stepped_forward_fires_only_the_latest() {
    let t = tt("0 * * * *", None);
    let d = due(
        &t,
        Some(utc("2025-06-01T10:00:00Z")),
        utc("2025-06-01T13:00:20Z"),
        FIVE_MIN,
    );
    assert_eq!(d.fire, Some(utc("2025-06-01T13:00:00Z")));
    assert_eq!(
        d.skipped,
        vec![utc("2025-06-01T11:00:00Z"), utc("2025-06-01T12:00:00Z")]
    );
    assert_eq!((d.skipped_count, d.skipped_count_exact), (2, true));
    assert_eq!(d.skipped_first, Some(utc("2025-06-01T11:00:00Z")));
    assert_eq!(d.too_late, None);
    assert_eq!(d.cursor, utc("2025-06-01T13:00:00Z"));
    assert_eq!(d.next, Some(utc("2025-06-01T14:00:00Z")));
}

// ---- Missed occurrences and starting_deadline ----

#[test]
fn down_across_five_back_within_the_deadline_fires_the_latest() {
    let t = tt("0 * * * *", None);
    let d = due(
        &t,
        Some(utc("2025-06-01T10:00:00Z")),
        utc("2025-06-01T15:04:59Z"),
        FIVE_MIN,
    );
    assert_eq!(d.fire, Some(utc("2025-06-01T15:00:00Z")));
    assert_eq!(
        d.skipped,
        vec![
            utc("2025-06-01T11:00:00Z"),
            utc("2025-06-01T12:00:00Z"),
            utc("2025-06-01T13:00:00Z"),
            utc("2025-06-01T14:00:00Z"),
        ]
    );
    assert_eq!((d.skipped_count, d.skipped_count_exact), (4, true));
    assert_eq!(d.too_late, None);
    assert_eq!(d.cursor, utc("2025-06-01T15:00:00Z"));
    assert_eq!(d.next, Some(utc("2025-06-01T16:00:00Z")));
    // Exactly at the deadline still fires.
    let d = due(
        &t,
        Some(utc("2025-06-01T10:00:00Z")),
        utc("2025-06-01T15:05:00Z"),
        FIVE_MIN,
    );
    assert_eq!(d.fire, Some(utc("2025-06-01T15:00:00Z")));
}

#[test]
fn down_across_five_back_after_the_deadline_fires_nothing() {
    let t = tt("0 * * * *", None);
    let d = due(
        &t,
        Some(utc("2025-06-01T10:00:00Z")),
        utc("2025-06-01T15:05:01Z"),
        FIVE_MIN,
    );
    assert_eq!(d.fire, None);
    assert_eq!(d.too_late, Some(utc("2025-06-01T15:00:00Z")));
    assert_eq!(
        d.skipped,
        vec![
            utc("2025-06-01T11:00:00Z"),
            utc("2025-06-01T12:00:00Z"),
            utc("2025-06-01T13:00:00Z"),
            utc("2025-06-01T14:00:00Z"),
            utc("2025-06-01T15:00:00Z"),
        ]
    );
    assert_eq!((d.skipped_count, d.skipped_count_exact), (5, true));
    assert_eq!(d.skipped_first, Some(utc("2025-06-01T11:00:00Z")));
    assert_eq!(d.cursor, utc("2025-06-01T15:00:00Z"));
    assert_eq!(d.next, Some(utc("2025-06-01T16:00:00Z")));
    // Handled: the same moment again is quiet.
    let again = due(&t, Some(d.cursor), utc("2025-06-01T15:05:01Z"), FIVE_MIN);
    assert_eq!(
        (again.fire, again.too_late, again.skipped_count),
        (None, None, 0)
    );
}

#[test]
fn no_deadline_means_any_lateness_is_fine() {
    let t = tt("0 * * * *", None);
    let d = due(
        &t,
        Some(utc("2025-06-01T10:00:00Z")),
        utc("2025-06-03T15:59:59Z"),
        None,
    );
    assert_eq!(d.fire, Some(utc("2025-06-03T15:00:00Z")));
    assert_eq!(d.too_late, None);
    assert_eq!((d.skipped_count, d.skipped_count_exact), (52, true));
    // A deadline too large for chrono is no deadline either.
    let d = due(
        &t,
        Some(utc("2025-06-01T10:00:00Z")),
        utc("2025-06-03T15:59:59Z"),
        Some(Duration::MAX),
    );
    assert_eq!(d.fire, Some(utc("2025-06-03T15:00:00Z")));
}

// ---- Seconds-level schedules and long gaps ----

#[test]
fn seconds_level_schedules_work() {
    let t = tt("*/2 * * * * *", None);
    let base = utc("2025-06-01T10:00:00Z");
    assert_eq!(t.next_after(base), Some(base + secs(2)));
    assert_eq!(
        t.next_after(base + TimeDelta::milliseconds(1500)),
        Some(base + secs(2))
    );
    let d = due(
        &t,
        Some(base),
        base + TimeDelta::milliseconds(7500),
        FIVE_MIN,
    );
    assert_eq!(d.fire, Some(base + secs(6)));
    assert_eq!(d.skipped, vec![base + secs(2), base + secs(4)]);
    assert_eq!(d.next, Some(base + secs(8)));
    // A daemon ticking every 500 ms fires every one, once.
    let fired = simulate(
        &t,
        base,
        base + secs(60),
        TimeDelta::milliseconds(500),
        FIVE_MIN,
    );
    let expected: Vec<_> = (1..=30).map(|i| base + secs(2 * i)).collect();
    assert_eq!(fired, expected);
    // Six fields, seconds fixed: a wall-clock job at hh:mm:15.
    let t = tt("15 30 1 * * *", Some("Europe/London"));
    assert_eq!(
        t.next_after(utc("2025-06-01T00:00:00Z")),
        Some(utc("2025-06-01T00:30:15Z"))
    );
}

#[test]
fn a_year_long_gap_on_a_per_second_schedule_is_quick() {
    let cursor = utc("2025-01-01T00:00:00Z");
    let now = utc("2026-01-01T00:00:00.500Z");
    for (expr, zone) in [
        ("* * * * * *", None),
        ("* * * * * *", Some("America/New_York")),
        // No `*`: a wall-clock job, searched on the naive wall clock, through both DST changes.
        ("0-59 0-59 0-23 * * *", Some("America/New_York")),
    ] {
        let t = tt(expr, zone);
        let d = due(&t, Some(cursor), now, Some(Duration::from_secs(1)));
        let latest = utc("2026-01-01T00:00:00Z");
        assert_eq!(d.fire, Some(latest), "{expr} {zone:?}");
        assert_eq!(d.cursor, latest);
        assert_eq!(d.next, Some(latest + secs(1)));
        assert!(!d.skipped_count_exact);
        assert!(d.skipped_count > SKIP_COUNT_CAP);
        assert_eq!(d.skipped_first, Some(cursor + secs(1)));
        let expected: Vec<_> = (1..=SKIPPED_KEEP as i64)
            .rev()
            .map(|i| latest - secs(i))
            .collect();
        assert_eq!(d.skipped, expected, "{expr} {zone:?}");
    }
    // A daily one over a year: exact.
    let t = tt("0 3 * * *", Some("Europe/Paris"));
    let d = due(&t, Some(cursor), now, None);
    assert_eq!(d.fire, Some(utc("2025-12-31T02:00:00Z")));
    assert_eq!((d.skipped_count, d.skipped_count_exact), (364, true));
    assert_eq!(d.skipped.len(), SKIPPED_KEEP);
    assert_eq!(d.skipped.last(), Some(&utc("2025-12-30T02:00:00Z")));
    assert_eq!(d.skipped_first, Some(utc("2025-01-01T02:00:00Z")));
}

#[test]
fn skipped_counts_are_exact_until_they_cannot_be() {
    let t = tt("* * * * * *", None);
    let cursor = utc("2025-06-01T00:00:00Z");
    let cap = SKIP_COUNT_CAP as i64;
    let keep = SKIPPED_KEEP as i64;
    for skipped in [
        1,
        SKIPPED_KEEP as i64,
        cap - 1,
        cap,
        cap + 1,
        cap + 50,
        cap + keep,
        cap + keep + 1,
        cap + keep + 2,
        cap + keep + 3,
        cap + 5000,
    ] {
        // Occurrences cursor+1s ..= cursor+(skipped+1)s; the last fires.
        let latest = cursor + secs(skipped + 1);
        let d = due(&t, Some(cursor), latest, FIVE_MIN);
        assert_eq!(d.fire, Some(latest));
        let expected_list: Vec<_> = (1..=skipped.min(keep))
            .rev()
            .map(|i| latest - secs(i))
            .collect();
        assert_eq!(d.skipped, expected_list, "{skipped}");
        assert_eq!(d.skipped_first, Some(cursor + secs(1)));
        if d.skipped_count_exact {
            assert_eq!(d.skipped_count, skipped as u64, "{skipped}");
        } else {
            assert!(
                d.skipped_count <= skipped as u64,
                "{skipped}: a lower bound"
            );
            assert_eq!(d.skipped_count, SKIP_COUNT_EXACT_MAX + 1, "{skipped}");
        }
        assert_eq!(
            d.skipped_count_exact,
            skipped <= SKIP_COUNT_EXACT_MAX as i64,
            "{skipped}: exact while the two walks meet"
        );
    }
}

/// A count of exactly [`SKIP_COUNT_EXACT_MAX`] is exact, not a lower bound; one more is past
/// what is counted: a lower bound that is still true (one more than the exact maximum).
#[test]
fn a_count_at_the_bound_is_exact_and_one_past_it_is_a_lower_bound() {
    let t = tt("* * * * * *", None);
    let cursor = utc("2025-06-01T00:00:00Z");
    let at = SKIP_COUNT_EXACT_MAX as i64;
    assert_eq!(at, 1102);
    for (skipped, count, exact) in [
        (at, SKIP_COUNT_EXACT_MAX, true),
        (at + 1, SKIP_COUNT_EXACT_MAX + 1, false),
        (at + 2, SKIP_COUNT_EXACT_MAX + 1, false),
    ] {
        let latest = cursor + secs(skipped + 1);
        let d = due(&t, Some(cursor), latest, None);
        assert_eq!(d.fire, Some(latest), "{skipped}");
        assert_eq!(
            (d.skipped_count, d.skipped_count_exact),
            (count, exact),
            "{skipped} skipped"
        );
        assert_eq!(d.skipped.len(), SKIPPED_KEEP);
        assert_eq!(d.skipped.last(), Some(&(latest - secs(1))));
        assert_eq!(d.skipped_first, Some(cursor + secs(1)));
    }
}

mod clock;
mod oracle;
