//! Firing schedule occurrences: one run per occurrence, the cursor moves in the same
//! transaction, overlap policies.

use store::*;

use crate::common::{open, req, Db};

fn schedule_runs(s: &Store) -> Vec<Run> {
    s.list_runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .filter(|r| r.trigger == Trigger::Schedule)
        .collect()
}

/// An occurrence is handled once, by one run. A second pass computed from a stale
/// cursor writes nothing; even a caller that ignores the cursor cannot insert a second run for
/// the same occurrence (unique key).
fn one_run_per_occurrence(db: &Db) {
    let (s, epoch) = open(db);
    let first = s
        .fire_schedule(epoch, &req(None, Some(60_000), OverlapPolicy::Queue), 1)
        .unwrap();
    assert!(first.written && first.queued.is_some());
    // Same step again from the old cursor: refused as stale.
    let again = s
        .fire_schedule(epoch, &req(None, Some(60_000), OverlapPolicy::Queue), 2)
        .unwrap();
    assert!(!again.written);
    // From the new cursor but the same occurrence (a buggy caller): the unique key refuses it.
    let dup = s
        .fire_schedule(
            epoch,
            &req(Some(60_000), Some(60_000), OverlapPolicy::Queue),
            3,
        )
        .unwrap();
    assert!(dup.queued.is_none());
    assert_eq!(schedule_runs(&s).len(), 1);
    let row = &s.schedules().unwrap()[0];
    assert_eq!(row.cursor, 60_000);
}

fn forbid_skips_while_active_and_records_it(db: &Db) {
    let (s, epoch) = open(db);
    let f = s
        .fire_schedule(epoch, &req(None, Some(60_000), OverlapPolicy::Forbid), 1)
        .unwrap();
    let id = f.queued.unwrap();
    s.claim(
        epoch,
        &[ClaimRequest {
            run_id: id,
            namespace: "default".into(),
            global_cap: 4,
            namespace_cap: None,
            max_parallel: 1,
            host_cap: None,
            config_version: None,
        }],
        2,
    )
    .unwrap();
    let g = s
        .fire_schedule(
            epoch,
            &req(Some(60_000), Some(120_000), OverlapPolicy::Forbid),
            3,
        )
        .unwrap();
    assert!(g.queued.is_none());
    let skip = s.get_run(g.skipped_run.unwrap()).unwrap();
    assert_eq!(skip.status, RunStatus::Cancelled);
    assert_eq!(skip.occurrence, Some(120_000));
    assert!(skip.reason.unwrap().contains("forbid"));
    assert_eq!(s.schedules().unwrap()[0].skipped_total, 1);
}

fn replace_flags_the_active_run_and_queues_the_new_one(db: &Db) {
    let (s, epoch) = open(db);
    let id = s
        .fire_schedule(epoch, &req(None, Some(60_000), OverlapPolicy::Replace), 1)
        .unwrap()
        .queued
        .unwrap();
    s.claim(
        epoch,
        &[ClaimRequest {
            run_id: id,
            namespace: "default".into(),
            global_cap: 4,
            namespace_cap: None,
            max_parallel: 1,
            host_cap: None,
            config_version: None,
        }],
        2,
    )
    .unwrap();
    let g = s
        .fire_schedule(
            epoch,
            &req(Some(60_000), Some(120_000), OverlapPolicy::Replace),
            3,
        )
        .unwrap();
    assert_eq!(g.replaced, Some(id));
    assert!(s.get_run(id).unwrap().cancel_requested);
    assert_eq!(
        s.get_run(g.queued.unwrap()).unwrap().status,
        RunStatus::Queued
    );
}

/// More missed occurrences than the list keeps: the note's range starts at the first one
/// missed, not at the first one listed (the hundredth from last).
fn the_missed_range_starts_at_the_first_missed_occurrence(db: &Db) {
    let (s, epoch) = open(db);
    let mut r = req(None, Some(1_000_000), OverlapPolicy::Queue);
    r.skipped = (0..100).map(|i| 1_000_000 - (100 - i) * 1_000).collect();
    r.skipped_first = Some(1_000);
    r.skipped_count = 999;
    let f = s.fire_schedule(epoch, &r, 1).unwrap();
    let run = s.get_run(f.queued.unwrap()).unwrap();
    let note = run.reason.unwrap();
    assert!(
        note.contains(&format!(
            "999 earlier occurrence(s) missed and skipped ({} .. {})",
            rfc3339(1_000),
            rfc3339(999_000)
        )),
        "{note}"
    );
}

fn too_late_occurrence_is_recorded_not_run(db: &Db) {
    let (s, epoch) = open(db);
    let mut r = req(None, None, OverlapPolicy::Forbid);
    r.cursor = 300_000;
    r.too_late = Some(300_000);
    r.skipped = vec![240_000];
    r.skipped_count = 1;
    let f = s.fire_schedule(epoch, &r, 1).unwrap();
    assert!(f.queued.is_none());
    let skip = s.get_run(f.skipped_run.unwrap()).unwrap();
    assert_eq!(skip.status, RunStatus::Cancelled);
    assert!(
        skip.reason
            .as_deref()
            .unwrap()
            .contains("starting_deadline"),
        "{skip:?}"
    );
    assert_eq!(s.schedules().unwrap()[0].skipped_total, 2);
}

both_backends!(
    one_run_per_occurrence,
    forbid_skips_while_active_and_records_it,
    replace_flags_the_active_run_and_queues_the_new_one,
    the_missed_range_starts_at_the_first_missed_occurrence,
    too_late_occurrence_is_recorded_not_run,
);
