//! `next_after`, `last_in` and `due` against a brute-force oracle that reads the definitions in
//! the timetable's module docs second by second, around real DST changes (examples, then
//! property tests with random clocks).

use super::*;

/// The instants in `year` where `tz` changes its UTC offset (found on a 15-minute grid).
fn transitions(tz: Tz, year: i32) -> Vec<DateTime<Utc>> {
    let start = Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0).unwrap();
    let end = Utc.with_ymd_and_hms(year + 1, 1, 1, 0, 0, 0).unwrap();
    let mut out = Vec::new();
    let mut t = start;
    let mut off = offset_secs(tz, t);
    while t < end {
        let n = t + mins(15);
        let o = offset_secs(tz, n);
        if o != off {
            // Narrow to the second.
            let (mut lo, mut hi) = (t, n);
            while (hi - lo).num_seconds() > 1 {
                let mid = lo + secs((hi - lo).num_seconds() / 2);
                if offset_secs(tz, mid) == off {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            out.push(hi);
            off = o;
        }
        t = n;
    }
    out
}

/// The occurrences in `(from, to]` straight from the definitions in the module docs, by
/// looking at every second.
fn oracle(t: &Timetable, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let local = |i: DateTime<Utc>| i.with_timezone(&t.timezone()).naive_local();
    let matches = |w: &NaiveDateTime| t.cron.is_time_matching(w).unwrap();
    let mut out = Vec::new();
    if !t.is_wall_clock() {
        let mut i = from + secs(1);
        while i <= to {
            if matches(&local(i)) {
                out.push(i);
            }
            i += secs(1);
        }
        return out;
    }
    // Wall clock: instant i is an occurrence iff some matching wall-clock time w has i as the
    // first instant whose local time is >= w, i.e. w in (highest local time before i, local(i)].
    let margin = TimeDelta::hours(3);
    let mut high = local(from - margin);
    let mut i = from - margin + secs(1);
    while i <= to {
        let l = local(i);
        if l > high {
            let mut w = l;
            let mut hit = false;
            while w > high {
                if matches(&w) {
                    hit = true;
                    break;
                }
                w -= secs(1);
            }
            if hit && i > from {
                out.push(i);
            }
            high = l;
        }
        i += secs(1);
    }
    out
}

const ORACLE_EXPRS: &[&str] = &[
    "30 1 * * *",
    "0 2 * * *",
    "30 2 * * *",
    "0,30 2 * * *",
    "30 1,13 * * *",
    "0 0,2 * * *",
    "0 * * * *",
    "*/20 * * * *",
    "* 2 * * *",
    "15 30 1 * * *",
    "*/20 30 1 * * *",
];

#[test]
fn next_after_and_last_in_agree_with_the_definition_around_dst_changes() {
    let mut cases = Vec::new();
    for (zone, year) in [
        ("America/New_York", 2026),
        ("US/Pacific", 2025),
        ("Europe/London", 2025),
        ("Australia/Lord_Howe", 2025),
        ("America/Havana", 2025),
        ("Pacific/Apia", 2011),
    ] {
        let tz: Tz = zone.parse().unwrap();
        let ts = transitions(tz, year);
        assert!(!ts.is_empty(), "{zone} {year}");
        cases.extend(ts.into_iter().map(|t| (zone, t)));
    }
    for (zone, at) in cases {
        let from = at - TimeDelta::hours(3);
        let to = at + TimeDelta::hours(3);
        for expr in ORACLE_EXPRS {
            let t = tt(expr, Some(zone));
            let want = oracle(&t, from, to);
            assert_eq!(
                occurrences(&t, from, to),
                want,
                "{expr} in {zone} around {at}"
            );
            // Spot checks from arbitrary instants, with sub-seconds.
            let mut s = from + TimeDelta::milliseconds(250);
            while s < to {
                let next = want.iter().copied().find(|o| *o > s);
                if let Some(n) = next {
                    assert_eq!(t.next_after(s), Some(n), "{expr} {zone} next_after {s}");
                }
                let last = want.iter().copied().rfind(|o| *o <= s);
                assert_eq!(t.last_in(from, s), last, "{expr} {zone} last_in {s}");
                s += secs(7 * 60 + 13);
            }
        }
    }
}

// ---- Property: no occurrence ever fires twice ----

const PROP_EXPRS: &[&str] = &[
    "*/2 * * * * *",
    "0 * * * *",
    "*/15 * * * *",
    "30 1 * * *",
    "0 2 * * *",
    "0,30 2 * * *",
    "30 1,13 * * *",
    "* 2 * * *",
];

/// (zone, an instant near one of its DST changes)
const PROP_ZONES: &[(&str, &str)] = &[
    ("UTC", "2026-11-01T06:00:00Z"),
    ("America/New_York", "2026-11-01T06:00:00Z"),
    ("America/New_York", "2026-03-08T07:00:00Z"),
    ("US/Pacific", "2025-03-09T10:00:00Z"),
    ("Europe/London", "2025-10-26T01:00:00Z"),
    ("Australia/Lord_Howe", "2025-04-05T15:00:00Z"),
];

/// Whether `o` is on the timetable, checked from the definitions rather than `next_after`.
fn is_real_occurrence(t: &Timetable, o: DateTime<Utc>) -> bool {
    if o.nanosecond() != 0 {
        return false;
    }
    let tz = t.timezone();
    let local = o.with_timezone(&tz).naive_local();
    if t.cron.is_time_matching(&local).unwrap() {
        // A wall-clock job runs a repeated time at its first instant only.
        return !t.is_wall_clock()
            || tz.from_local_datetime(&local).earliest() == Some(o.with_timezone(&tz));
    }
    // Otherwise only the first instant after a gap holding a matching wall-clock time.
    let before = (o - secs(1)).with_timezone(&tz).naive_local();
    if !t.is_wall_clock() || local - before <= secs(1) {
        return false;
    }
    let mut w = before + secs(1);
    while w < local {
        if t.cron.is_time_matching(&w).unwrap() {
            return true;
        }
        w += secs(1);
    }
    false
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn no_occurrence_fires_twice(
        expr in 0..PROP_EXPRS.len(),
        zone in 0..PROP_ZONES.len(),
        start in -(2 * 86_400i64)..86_400i64,
        steps in proptest::collection::vec(
            prop_oneof![
                4 => 0i64..600_000,        // forward, up to 10 minutes (ms)
                2 => 0i64..14_400_000,     // forward, up to 4 hours (ms)
                1 => -900_000i64..0,       // a small step back, up to 15 minutes (ms)
            ],
            1..120,
        ),
        deadline in proptest::option::of(0u64..7200),
        fresh in any::<bool>(),
    ) {
        let (zone, near) = PROP_ZONES[zone];
        let t = tt(PROP_EXPRS[expr], Some(zone));
        let deadline = deadline.map(Duration::from_secs);
        let mut now = utc(near) + secs(start);
        let mut cursor = if fresh { None } else { Some(now - TimeDelta::hours(3)) };
        let mut fired: Vec<DateTime<Utc>> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        // Once the clock went back past the tolerance, the schedule restarts from it and may
        // propose again an occurrence it handled before; the store's unique key (project,
        // occurrence) is what refuses the second run then, not this function.
        let mut went_back = false;
        for step in steps {
            now += TimeDelta::milliseconds(step);
            let d = due(&t, cursor, now, deadline);
            let ahead = cursor.filter(|c| {
                crate::clock::ahead_of_clock(c.timestamp_millis(), now.timestamp_millis())
            });
            prop_assert_eq!(d.clock_back, ahead, "a step back is told iff it passes the tolerance");
            if ahead.is_some() {
                prop_assert_eq!(d.cursor, now.with_nanosecond(0).unwrap(), "restarts from the clock");
                prop_assert!(d.fire.is_none() && d.skipped.is_empty() && d.too_late.is_none());
                prop_assert!(d.next.is_none_or(|n| n > d.cursor && is_real_occurrence(&t, n)));
                went_back = true;
                cursor = Some(d.cursor);
                continue;
            }
            if let Some(c) = cursor {
                prop_assert!(d.cursor >= c, "the cursor moved back");
            }
            if let Some(f) = d.fire {
                prop_assert!(f <= now);
                prop_assert!(cursor.is_none_or(|c| f > c), "fired at or before the cursor");
                prop_assert!(went_back || fired.last().is_none_or(|l| f > *l), "not increasing");
                prop_assert!(is_real_occurrence(&t, f), "{f} is not on the timetable");
                prop_assert!(seen.insert(f) || went_back, "{f} fired twice");
                prop_assert_eq!(d.cursor, f);
                fired.push(f);
            }
            for s in &d.skipped {
                prop_assert!(cursor.is_some_and(|c| *s > c) && *s <= now);
                prop_assert!(is_real_occurrence(&t, *s), "skipped {s} is not on the timetable");
                prop_assert!(went_back || !seen.contains(s), "{s} skipped after firing");
            }
            prop_assert!(d.skipped.windows(2).all(|w| w[0] < w[1]));
            if let Some(n) = d.next {
                prop_assert!(n > d.cursor);
                prop_assert!(is_real_occurrence(&t, n));
            }
            cursor = Some(d.cursor);
        }
    }
}
