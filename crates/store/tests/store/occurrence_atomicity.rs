//! An occurrence is "handled" only when its run row exists, written in the same transaction as
//! the schedule's cursor. These tests make one of the two writes fail (a trigger added to the
//! database aborts it, as a `CHECK`, a `NOT NULL` or a full disk would) and check that neither
//! is left without the other: the failed fire is an error, the cursor has not moved, no run was
//! made, and the same occurrence fires once the failure is gone.
//!
//! They go red if the run row is written in a later transaction than the cursor (the cursor
//! would stay advanced with no run), or if a failed insert is taken for the unique
//! (project, occurrence) conflict that means "already handled".

use store::*;

use crate::common;
use crate::common::{open, Db};

/// Runs one of the pairs below: (SQLite's SQL, PostgreSQL's SQL).
fn exec(db: &Db, sql: (&str, &str)) {
    db.exec(sql.0, sql.1);
}

fn req(fire: Option<Millis>, overlap: OverlapPolicy) -> FireRequest {
    common::req(None, fire, overlap)
}

fn schedule_runs(s: &Store) -> Vec<Run> {
    s.list_runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .filter(|r| r.trigger == Trigger::Schedule)
        .collect()
}

const REFUSE_RUNS: (&str, &str) = (
    "CREATE TRIGGER refuse_schedule_runs BEFORE INSERT ON runs \
     WHEN NEW.trigger = 'schedule' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
    "CREATE FUNCTION refuse_schedule_runs() RETURNS trigger LANGUAGE plpgsql AS \
       $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$; \
     CREATE TRIGGER refuse_schedule_runs BEFORE INSERT ON runs FOR EACH ROW \
       WHEN (NEW.trigger = 'schedule') EXECUTE FUNCTION refuse_schedule_runs();",
);
const ALLOW_RUNS: (&str, &str) = (
    "DROP TRIGGER refuse_schedule_runs;",
    "DROP TRIGGER refuse_schedule_runs ON runs;",
);

/// Asserts the failed fire left nothing behind: no cursor, no run, no event of a run.
fn assert_nothing_written(s: &Store, what: &str) {
    assert!(
        s.schedules().unwrap().is_empty(),
        "{what}: the cursor moved although the occurrence has no run: {:?}",
        s.schedules().unwrap()
    );
    assert!(
        schedule_runs(s).is_empty(),
        "{what}: {:?}",
        schedule_runs(s)
    );
    assert!(s.events_after(0).unwrap().is_empty(), "{what}");
}

/// The run's insert fails (a trigger aborts it: a constraint failure, but not the unique
/// conflict): the fire is an error and rolls back, the cursor included; once the insert can
/// succeed, the same occurrence fires.
fn a_failed_insert_of_the_occurrence_run_leaves_the_cursor_unmoved(db: &Db) {
    let (s, epoch) = open(db);
    exec(db, REFUSE_RUNS);
    let r = req(Some(60_000), OverlapPolicy::Queue);
    let err = s
        .fire_schedule(epoch, &r, 1)
        .expect_err("a refused insert must not count as a handled occurrence");
    assert!(err.to_string().contains("refused by the test"), "{err}");
    assert_nothing_written(&s, "refused insert");

    exec(db, ALLOW_RUNS);
    let fired = s.fire_schedule(epoch, &r, 2).unwrap();
    assert!(fired.written, "{fired:?}");
    let id = fired.queued.expect("the occurrence fires on a later pass");
    let runs = schedule_runs(&s);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].id, id);
    assert_eq!(runs[0].occurrence, Some(60_000));
    assert_eq!(runs[0].status, RunStatus::Queued);
    assert_eq!(s.schedules().unwrap()[0].cursor, 60_000);
}

/// The same for the rows that record a skipped occurrence (overlap `forbid`, or missed by more
/// than the starting deadline): a skip is a handled occurrence too, so its row and the cursor
/// are written together or not at all.
fn a_failed_insert_of_a_skip_leaves_the_cursor_unmoved(db: &Db) {
    let (s, epoch) = open(db);
    let mut late = req(None, OverlapPolicy::Forbid);
    late.cursor = 300_000;
    late.too_late = Some(300_000);
    exec(db, REFUSE_RUNS);
    s.fire_schedule(epoch, &late, 1)
        .expect_err("a refused skip must not count as a handled occurrence");
    assert_nothing_written(&s, "refused skip");

    exec(db, ALLOW_RUNS);
    let fired = s.fire_schedule(epoch, &late, 2).unwrap();
    let skip = s
        .get_run(fired.skipped_run.expect("the skip is recorded"))
        .unwrap();
    assert_eq!(skip.status, RunStatus::Cancelled);
    assert_eq!(skip.occurrence, Some(300_000));
    assert_eq!(s.schedules().unwrap()[0].cursor, 300_000);
}

/// The cursor's write fails after the run was inserted: the run must go with it (one
/// transaction), or the next pass, from the old cursor, would find a run it did not make.
fn a_failed_cursor_write_leaves_no_run(db: &Db) {
    let (s, epoch) = open(db);
    exec(
        db,
        (
            "CREATE TRIGGER refuse_cursor BEFORE INSERT ON schedules \
             BEGIN SELECT RAISE(ABORT, 'cursor refused by the test'); END;",
            "CREATE FUNCTION refuse_cursor() RETURNS trigger LANGUAGE plpgsql AS \
               $$ BEGIN RAISE EXCEPTION 'cursor refused by the test'; END $$; \
             CREATE TRIGGER refuse_cursor BEFORE INSERT ON schedules FOR EACH ROW \
               EXECUTE FUNCTION refuse_cursor();",
        ),
    );
    let r = req(Some(60_000), OverlapPolicy::Queue);
    let err = s
        .fire_schedule(epoch, &r, 1)
        .expect_err("the cursor write fails");
    assert!(err.to_string().contains("cursor refused"), "{err}");
    assert_nothing_written(&s, "refused cursor");

    exec(
        db,
        (
            "DROP TRIGGER refuse_cursor;",
            "DROP TRIGGER refuse_cursor ON schedules;",
        ),
    );
    assert!(s.fire_schedule(epoch, &r, 2).unwrap().queued.is_some());
    assert_eq!(schedule_runs(&s).len(), 1);
    assert_eq!(s.schedules().unwrap()[0].cursor, 60_000);
}

/// Only an existing run of the occurrence means "handled": a pass that finds one (a caller that
/// ignored the cursor) writes no second run and no error, and moves the cursor.
fn an_existing_run_of_the_occurrence_is_the_only_handled(db: &Db) {
    let (s, epoch) = open(db);
    let r = req(Some(60_000), OverlapPolicy::Queue);
    let first = s.fire_schedule(epoch, &r, 1).unwrap().queued.unwrap();
    let mut again = req(Some(60_000), OverlapPolicy::Queue);
    again.expected_cursor = Some(60_000);
    again.cursor = 120_000;
    let fired = s.fire_schedule(epoch, &again, 2).unwrap();
    assert!(fired.written && fired.queued.is_none(), "{fired:?}");
    let runs = schedule_runs(&s);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].id, first);
    assert_eq!(s.schedules().unwrap()[0].cursor, 120_000);
}

/// The run an occurrence fires says how many earlier occurrences were missed and skipped with
/// it; a run that skipped none carries no such note.
fn the_fired_run_counts_the_occurrences_skipped_with_it(db: &Db) {
    let (s, epoch) = open(db);
    let quiet = s
        .fire_schedule(epoch, &req(Some(60_000), OverlapPolicy::Queue), 1)
        .unwrap()
        .queued
        .unwrap();
    assert_eq!(s.get_run(quiet).unwrap().reason, None);

    let mut late = req(Some(300_000), OverlapPolicy::Queue);
    late.expected_cursor = Some(60_000);
    late.skipped = vec![120_000, 180_000, 240_000];
    late.skipped_count = 3;
    let id = s.fire_schedule(epoch, &late, 2).unwrap().queued.unwrap();
    let reason = s.get_run(id).unwrap().reason.unwrap_or_default();
    assert!(
        reason.starts_with("3 earlier occurrence(s) missed and skipped"),
        "{reason}"
    );
    assert_eq!(s.schedules().unwrap()[0].skipped_total, 3);
}

both_backends!(
    a_failed_insert_of_the_occurrence_run_leaves_the_cursor_unmoved,
    a_failed_insert_of_a_skip_leaves_the_cursor_unmoved,
    a_failed_cursor_write_leaves_no_run,
    an_existing_run_of_the_occurrence_is_the_only_handled,
    the_fired_run_counts_the_occurrences_skipped_with_it,
);
