//! A schedule's `timezone`: wall-clock fields are read in that zone, interval schedules follow
//! real time, and a UTC schedule is unaffected by the daemon's own local zone.

use std::collections::BTreeSet;

use super::arming::*;
use super::notes::*;
use super::runs::*;
use crate::common::time::*;
use crate::common::*;

/// `timezone = "America/New_York"`: a per-second interval schedule still fires every second, and
/// a wall-clock schedule "S M H * * *" written in New York time fires at that New York time (a
/// UTC reading of the same fields would be 4-5 hours off). Beside them, a UTC wall-clock
/// schedule for the same instant fires at it although the daemon's own local zone (TZ) is New
/// York. DST specifics are unit-tested in
/// crates/config/src/schedule/timetable/tests.rs.
#[test]
fn timezone_schedules_fire_in_that_zone() {
    let f = Fleet::new("");
    let rec = f.file("rec");
    let cmd = sh(&format!(
        "echo occurrence=$FLEET_OCCURRENCE; {}",
        note("start", &rec)
    ));
    let fields = |t: i64| {
        let (sec, min, hour) = (
            t / 1000 % 60,
            t / 60_000 % 60,
            t.rem_euclid(86_400_000) / 3_600_000,
        );
        format!("{sec} {min} {hour} * * *")
    };
    let (_d, o) = arm(&f, &[("TZ", "America/New_York")], "wall", &[0], |o| {
        format!(
            "{HEADER}[projects.wall]\ncommand = {cmd}\nschedule = \"{}\"\ntimezone = \"America/New_York\"\n\
             [projects.utc]\ncommand = {cmd}\nschedule = \"{}\"\n\
             [projects.every]\ncommand = {cmd}\nschedule = \"*/1 * * * * *\"\ntimezone = \"America/New_York\"\n",
            fields(o[0] + new_york_offset_ms(o[0])),
            fields(o[0]),
        )
    });
    f.wait_until(
        DEADLINE,
        "the two wall-clock runs and 3 per-second runs",
        || {
            let done = |p: &str| {
                runs_of(&f, p)
                    .iter()
                    .filter(|r| s(r, "status") == "succeeded")
                    .count()
            };
            done("wall") >= 1 && done("utc") >= 1 && done("every") >= 3
        },
    );
    let day = 86_400_000;
    for p in ["wall", "utc"] {
        let runs = runs_of(&f, p);
        assert_eq!(runs.len(), 1, "{}", show(&runs));
        assert_eq!(
            occ(&runs[0]),
            Some(o[0]),
            "{p} fired at another instant: {}",
            runs[0]
        );
        assert_eq!(
            f.logs(id(&runs[0])).trim(),
            format!("occurrence={}", rfc3339(o[0]))
        );
    }
    // Their next occurrence is the same wall time tomorrow (in New York: barring a DST change).
    assert_eq!(
        schedule_row(&f, "utc").and_then(|(_, n)| n),
        Some(o[0] + day)
    );
    if new_york_offset_ms(o[0]) == new_york_offset_ms(o[0] + day) {
        let next = schedule_row(&f, "wall").and_then(|(_, n)| n);
        assert_eq!(
            next,
            Some(o[0] + day),
            "next occurrence of the daily New York schedule"
        );
    }
    let every = runs_of(&f, "every");
    let occs: BTreeSet<i64> = every.iter().map(|r| occ(r).unwrap()).collect();
    assert_eq!(occs.len(), every.len(), "{}", show(&every));
    assert!(occs.iter().all(|o| o % 1000 == 0));
    for r in every.iter().filter(|r| s(r, "status") == "succeeded") {
        assert_eq!(
            f.logs(id(r)).trim(),
            format!("occurrence={}", s(r, "occurrence"))
        );
    }
}
