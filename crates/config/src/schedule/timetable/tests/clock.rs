//! A clock that steps back: within the tolerance it is waited out, past it the schedule restarts
//! from the clock and tells the cursor it was behind.

use super::*;

/// A step back within the tolerance: nothing fires until the clock passes the cursor again,
/// the cursor stays, the next occurrence is still counted from it.
#[test]
fn a_small_clock_step_back_waits_for_the_cursor() {
    let t = tt("* * * * * *", None);
    let cursor = utc("2025-06-01T11:00:00Z");
    let tolerance = secs(crate::clock::STEP_BACK_TOLERANCE_MS / 1000);
    for back in [secs(1), secs(5), tolerance] {
        let d = due(&t, Some(cursor), cursor - back, None);
        assert_eq!(d.fire, None, "{back}");
        assert_eq!(d.clock_back, None, "{back}");
        assert_eq!(d.cursor, cursor, "{back}: the cursor stays");
        assert_eq!(
            d.next,
            Some(cursor + secs(1)),
            "{back}: counted from the cursor"
        );
    }
    let d = due(&t, Some(cursor), cursor + secs(1), None);
    assert_eq!(d.fire, Some(cursor + secs(1)));
}

/// A step back past the tolerance (a clock that ran a year ahead, then corrected): the
/// schedule restarts from the clock as a new one does, fires nothing for the past, and tells
/// the old cursor. Without it, nothing would fire for a year.
#[test]
fn a_clock_stepped_back_restarts_from_the_clock() {
    let t = tt("*/10 * * * * *", None);
    let ahead = utc("2026-06-01T11:00:00Z");
    let now = utc("2025-06-01T08:30:04.250Z");
    let d = due(&t, Some(ahead), now, None);
    assert_eq!(d.clock_back, Some(ahead));
    assert_eq!(d.fire, None);
    assert!(d.skipped.is_empty() && d.skipped_count == 0 && d.too_late.is_none());
    assert_eq!(d.cursor, utc("2025-06-01T08:30:04Z"));
    assert_eq!(d.next, Some(utc("2025-06-01T08:30:10Z")));
    // From there it runs as any schedule does.
    let d = due(&t, Some(d.cursor), utc("2025-06-01T08:30:10.100Z"), None);
    assert_eq!(d.clock_back, None);
    assert_eq!(d.fire, Some(utc("2025-06-01T08:30:10Z")));
    // Just past the tolerance counts; an hourly job too.
    let hourly = tt("0 * * * *", None);
    let cursor = utc("2025-06-01T11:00:00Z");
    let now =
        cursor - secs(crate::clock::STEP_BACK_TOLERANCE_MS / 1000) - TimeDelta::milliseconds(1);
    let d = due(&hourly, Some(cursor), now, None);
    assert_eq!(d.clock_back, Some(cursor));
    assert_eq!(
        d.next,
        Some(cursor),
        "the next hour is the old cursor again"
    );
}
