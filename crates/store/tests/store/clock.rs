//! Persisted instants against a clock that stepped back: the record a schedule keeps of it, an
//! occurrence proposed again after it, and delays set by the clock that was ahead.

use store::*;

use crate::common::{open, req, Db};

const YEAR: Millis = 365 * 86_400_000;

fn a_schedule_keeps_a_record_of_the_clock_going_back(db: &Db) {
    let (s, epoch) = open(db);
    let ahead = YEAR + 60_000;
    s.fire_schedule(epoch, &req(None, Some(ahead), OverlapPolicy::Queue), ahead)
        .unwrap();
    assert_eq!(s.schedules().unwrap()[0].clock_back, None);
    let mut back = req(Some(ahead), None, OverlapPolicy::Queue);
    back.cursor = 5_000;
    back.clock_back_from = Some(ahead);
    assert!(s.fire_schedule(epoch, &back, 5_500).unwrap().written);
    let row = &s.schedules().unwrap()[0];
    assert_eq!(row.cursor, 5_000, "the cursor restarts from the clock");
    let record = ClockBack {
        seen_at: 5_500,
        cursor_was: ahead,
    };
    assert_eq!(row.clock_back, Some(record));
    // Later steps of the same timetable keep it.
    s.fire_schedule(
        epoch,
        &req(Some(5_000), Some(60_000), OverlapPolicy::Queue),
        60_000,
    )
    .unwrap();
    assert_eq!(s.schedules().unwrap()[0].clock_back, Some(record));
    // A new timetable starts afresh.
    let mut other = req(None, None, OverlapPolicy::Queue);
    other.timetable = "0 * * * * UTC".into();
    other.cursor = 61_000;
    s.fire_schedule(epoch, &other, 61_000).unwrap();
    assert_eq!(s.schedules().unwrap()[0].clock_back, None);
}

/// After the clock went back, the schedule proposes again an occurrence it handled under the
/// clock that was ahead: no second run, and with overlap `replace` the active run is not asked
/// to stop for it.
fn an_occurrence_proposed_again_neither_runs_nor_replaces(db: &Db) {
    let (s, epoch) = open(db);
    let first = s
        .fire_schedule(epoch, &req(None, Some(60_000), OverlapPolicy::Replace), 1)
        .unwrap()
        .queued
        .unwrap();
    let second = s
        .fire_schedule(
            epoch,
            &req(Some(60_000), Some(120_000), OverlapPolicy::Replace),
            2,
        )
        .unwrap()
        .queued
        .unwrap();
    s.claim(
        epoch,
        &[ClaimRequest {
            run_id: second,
            namespace: "default".into(),
            global_cap: 4,
            namespace_cap: None,
            max_parallel: 1,
            host_cap: None,
            config_version: None,
        }],
        3,
    )
    .unwrap();
    // Back to before 60 s, then 60 s is due again.
    let again = s
        .fire_schedule(
            epoch,
            &req(Some(120_000), Some(60_000), OverlapPolicy::Replace),
            4,
        )
        .unwrap();
    assert!(again.written);
    assert_eq!(again.queued, None, "no second run for one occurrence");
    assert_eq!(again.replaced, None, "nothing replaced for it");
    assert!(!s.get_run(second).unwrap().cancel_requested);
    let runs = s.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().any(|r| r.id == first));
}

fn retry_like(s: &Store, project: &str, enqueued_at: Millis, delay: Millis) -> RunId {
    s.enqueue(
        &NewRun {
            project: project.into(),
            namespace: "default".into(),
            priority: 0,
            trigger: Trigger::Retry,
            occurrence: None,
            not_before: enqueued_at + delay,
            ..Default::default()
        },
        enqueued_at,
    )
    .unwrap()
}

/// A delay set by a clock a year ahead is counted again from now, once; a delay set by this
/// clock, or by one ahead within the tolerance, is left as it is.
fn delays_set_by_a_clock_that_was_ahead_count_from_now(db: &Db) {
    let (s, epoch) = open(db);
    let now = 10 * YEAR;
    let tolerance = 10_000;
    let stale = retry_like(&s, "a", now + YEAR, 30_000);
    let fine = retry_like(&s, "b", now - 5_000, 30_000);
    let near = retry_like(&s, "c", now + 9_000, 30_000);
    let plain = s
        .enqueue(
            &NewRun {
                project: "d".into(),
                namespace: "default".into(),
                priority: 0,
                trigger: Trigger::Manual,
                occurrence: None,
                not_before: 0,
                ..Default::default()
            },
            now + YEAR,
        )
        .unwrap();
    let changed = s.rebase_delays(epoch, now, tolerance).unwrap();
    assert_eq!(
        changed,
        vec![Delayed {
            run_id: stale,
            project: "a".into(),
            not_before_was: now + YEAR + 30_000,
            not_before: now + 30_000,
        }]
    );
    let r = s.get_run(stale).unwrap();
    assert_eq!((r.enqueued_at, r.not_before), (now, now + 30_000));
    assert!(r.reason.unwrap().contains("the clock went back"));
    assert_eq!(s.get_run(fine).unwrap().not_before, now + 25_000);
    assert_eq!(s.get_run(near).unwrap().not_before, now + 39_000);
    assert_eq!(s.get_run(plain).unwrap().not_before, 0);
    assert_eq!(s.next_not_before(now).unwrap(), Some(now + 25_000));
    // Once only: it is now a delay of this clock.
    assert!(s
        .rebase_delays(epoch, now + 1_000, tolerance)
        .unwrap()
        .is_empty());
    // Fenced like every write that decides when a run may start.
    let s2 = s.clone();
    s2.take_over("local", 2, "fleet.toml", "{}", now).unwrap();
    retry_like(&s, "e", now + YEAR, 1_000);
    assert!(matches!(
        s.rebase_delays(epoch, now, tolerance),
        Err(StoreError::Fenced { .. })
    ));
}

both_backends!(
    a_schedule_keeps_a_record_of_the_clock_going_back,
    an_occurrence_proposed_again_neither_runs_nor_replaces,
    delays_set_by_a_clock_that_was_ahead_count_from_now,
);
