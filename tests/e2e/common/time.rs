//! Time as the tests read it: the wall clock in milliseconds, RFC 3339 as fleet prints it
//! ("…T…:…:….mmmZ"), and New York's offset by the US rules, all independent of fleet's own code
//! and of the host's tzdata.

use std::time::{Duration, Instant};

use crate::common::now_ms;

/// Polls the wall clock until it reads at least `at` (ms). This is the scenario ("stay down
/// until the occurrence has passed"), not synchronisation with the daemon.
pub fn wait_clock(at: i64) {
    let limit = Instant::now() + Duration::from_secs(120);
    while now_ms() < at {
        assert!(Instant::now() < limit, "wait_clock({at}): too far ahead");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (inverse of [`days_from_civil`]).
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// An instant (ms UTC) as fleet prints it: `2026-11-30T11:17:19.000Z`.
pub fn rfc3339(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// Parses RFC 3339 with a `Z` or `±hh:mm` offset and optional fraction; ms UTC.
pub fn parse_rfc3339(s: &str) -> i64 {
    let bad = || panic!("not an RFC 3339 time: {s:?}");
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        bad();
    }
    let num = |r: std::ops::Range<usize>| -> i64 { s[r].parse().unwrap_or_else(|_| bad()) };
    let (y, mo, d, h, mi, sec) = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    );
    let mut i = 19;
    let mut frac_ms = 0;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = &s[start..i];
        let padded = format!("{:0<3}", &digits[..digits.len().min(3)]);
        frac_ms = padded.parse().unwrap_or_else(|_| bad());
    }
    let offset_ms = match &s[i..] {
        "Z" | "z" => 0,
        o if o.len() == 6 => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (num(i + 1..i + 3) * 3_600_000 + num(i + 4..i + 6) * 60_000)
        }
        _ => bad(),
    };
    (days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec) * 1000 + frac_ms - offset_ms
}

/// America/New_York's UTC offset (ms) at an instant, by the US rules in force since 2007: EDT
/// (-4 h) from the second Sunday of March 02:00 EST to the first Sunday of November 02:00 EDT,
/// EST (-5 h) otherwise. Independent of the host's tzdata and of chrono-tz.
pub fn new_york_offset_ms(t: i64) -> i64 {
    let (y, _, _) = civil_from_days(t.div_euclid(86_400_000));
    // 1970-01-01 was a Thursday: weekday (0 = Sunday) of day n is (n + 4) mod 7.
    let nth_sunday = |month: i64, n: i64| {
        let first = days_from_civil(y, month, 1);
        let to_sunday = (7 - (first + 4).rem_euclid(7)) % 7;
        first + to_sunday + 7 * (n - 1)
    };
    let dst_start = nth_sunday(3, 2) * 86_400_000 + 7 * 3_600_000; // 02:00 EST = 07:00 UTC
    let dst_end = nth_sunday(11, 1) * 86_400_000 + 6 * 3_600_000; // 02:00 EDT = 06:00 UTC
    if dst_start <= t && t < dst_end {
        -4 * 3_600_000
    } else {
        -5 * 3_600_000
    }
}

#[test]
fn time_helpers_agree_with_known_instants() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(parse_rfc3339("2026-11-01T05:30:00.000Z"), 1_793_511_000_000);
    assert_eq!(rfc3339(1_793_511_000_000), "2026-11-01T05:30:00.000Z");
    assert_eq!(
        parse_rfc3339("2026-11-01T01:30:00-04:00"),
        parse_rfc3339("2026-11-01T05:30:00Z")
    );
    // 2026-11-01 05:59:59Z is still EDT; 06:00Z is EST. 2026-03-08 07:00Z starts EDT.
    assert_eq!(
        new_york_offset_ms(parse_rfc3339("2026-11-01T05:59:59Z")),
        -4 * 3_600_000
    );
    assert_eq!(
        new_york_offset_ms(parse_rfc3339("2026-11-01T06:00:00Z")),
        -5 * 3_600_000
    );
    assert_eq!(
        new_york_offset_ms(parse_rfc3339("2026-03-08T06:59:59Z")),
        -5 * 3_600_000
    );
    assert_eq!(
        new_york_offset_ms(parse_rfc3339("2026-03-08T07:00:00Z")),
        -4 * 3_600_000
    );
}
