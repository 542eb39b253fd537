//! Unit tests of the firing decision over a fake [`FireSteps`] that records what it was asked.

use super::*;

/// Records the writes; `runs` are the project's queued and active runs, `existing` the
/// occurrences that already have their run.
#[derive(Default)]
struct Fake {
    runs: Vec<(RunId, String)>,
    held: Option<HoldKind>,
    existing: Vec<Millis>,
    next_id: RunId,
    log: Vec<String>,
}

impl CancelWrites for Fake {
    fn cancel_if_queued(&mut self, id: RunId, reason: &str, _: Millis) -> Result<bool> {
        self.log.push(format!("skip {id}: {reason}"));
        Ok(true)
    }
    fn request_stop(&mut self, id: RunId, _: &str, _: Millis) -> Result<()> {
        self.log.push(format!("stop {id}"));
        Ok(())
    }
}

impl FireSteps for Fake {
    fn queued_and_active(&mut self, _: &str) -> Result<Vec<(RunId, String)>> {
        Ok(self.runs.clone())
    }
    fn held_by(&mut self, _: &str, _: &str) -> Result<Option<HoldKind>> {
        Ok(self.held)
    }
    fn insert_unique(&mut self, new: &NewRun, _: Millis) -> Result<Option<RunId>> {
        if self.existing.contains(&new.occurrence.unwrap()) {
            return Ok(None);
        }
        self.next_id += 1;
        self.log.push(format!("insert {}", self.next_id));
        Ok(Some(self.next_id))
    }
    fn set_reason(&mut self, id: RunId, note: &str) -> Result<()> {
        self.log.push(format!("note {id}: {note}"));
        Ok(())
    }
}

fn req(overlap: OverlapPolicy, max_parallel: u32) -> FireRequest {
    FireRequest {
        project: "web".into(),
        namespace: "default".into(),
        timetable: "every 1m".into(),
        expected_cursor: None,
        cursor: 60_000,
        next_fire: Some(120_000),
        fire: Some(60_000),
        skipped: vec![],
        skipped_first: None,
        skipped_count: 0,
        skipped_count_at_least: false,
        too_late: None,
        overlap,
        max_parallel,
        clock_back_from: None,
    }
}

fn fake(runs: &[(RunId, &str)]) -> Fake {
    Fake {
        runs: runs.iter().map(|(id, s)| (*id, s.to_string())).collect(),
        next_id: 100,
        ..Fake::default()
    }
}

#[test]
fn forbid_with_a_run_active_records_a_skip() {
    let mut f = fake(&[(7, "running")]);
    let (out, totals) = fire(&mut f, &req(OverlapPolicy::Forbid, 1), 0).unwrap();
    assert_eq!(out.skipped_run, Some(101));
    assert_eq!(out.queued, None);
    assert_eq!(
        f.log,
        vec![
            "insert 101".to_string(),
            "skip 101: skipped: overlap = \"forbid\" and run 7 of this project is running"
                .to_string()
        ]
    );
    assert_eq!(totals.skipped_now, 1);
}

#[test]
fn forbid_with_a_free_seat_queues() {
    let mut f = fake(&[(7, "running")]);
    let (out, totals) = fire(&mut f, &req(OverlapPolicy::Forbid, 2), 0).unwrap();
    assert_eq!(out.queued, Some(101));
    assert_eq!(out.skipped_run, None);
    assert_eq!(totals.skipped_now, 0);
}

#[test]
fn replace_stops_the_oldest_active_run_once_seats_are_full() {
    let mut f = fake(&[(7, "running"), (9, "queued")]);
    let (out, _) = fire(&mut f, &req(OverlapPolicy::Replace, 1), 0).unwrap();
    assert_eq!(out.queued, Some(101));
    assert_eq!(out.replaced, Some(7));
}

#[test]
fn replace_stops_nothing_when_the_occurrence_had_its_run() {
    let mut f = fake(&[(7, "running")]);
    f.existing = vec![60_000];
    let (out, _) = fire(&mut f, &req(OverlapPolicy::Replace, 1), 0).unwrap();
    assert_eq!(out.queued, None);
    assert_eq!(
        out.replaced, None,
        "a proposal seen again must not stop the run"
    );
}

#[test]
fn a_paused_project_records_a_skip_whatever_the_overlap() {
    let mut f = fake(&[]);
    f.held = Some(HoldKind::Namespace);
    let (out, _) = fire(&mut f, &req(OverlapPolicy::Queue, 1), 0).unwrap();
    assert_eq!(out.skipped_run, Some(101));
    assert!(
        f.log[1].ends_with("skipped: paused (namespace default)"),
        "{:?}",
        f.log
    );
}

#[test]
fn missed_occurrences_are_noted_on_the_queued_run_and_counted() {
    let mut f = fake(&[]);
    let mut r = req(OverlapPolicy::Queue, 1);
    r.skipped = vec![0, 30_000];
    r.skipped_count = 2;
    r.too_late = Some(45_000);
    let (out, totals) = fire(&mut f, &r, 0).unwrap();
    assert_eq!(out.queued, Some(101));
    assert!(f
        .log
        .iter()
        .any(|l| l.starts_with("note 101: 2 earlier occurrence(s)")));
    assert_eq!(out.skipped_run, Some(102), "the late occurrence's skip");
    assert_eq!(totals.skipped_now, 3);
    assert_eq!(totals.last_skipped, Some(45_000));
}

/// The step goes on only from the cursor it was computed from; a cursor stored under another
/// timetable counts as none.
#[test]
fn the_step_goes_on_only_from_the_expected_cursor() {
    let mut r = req(OverlapPolicy::Queue, 1);
    assert!(cursor_is_expected(&r, None));
    assert!(!cursor_is_expected(&r, Some(("every 1m", 5))));
    assert!(cursor_is_expected(&r, Some(("another timetable", 5))));
    r.expected_cursor = Some(5);
    assert!(cursor_is_expected(&r, Some(("every 1m", 5))));
    assert!(!cursor_is_expected(&r, Some(("every 1m", 6))));
    assert!(!cursor_is_expected(&r, Some(("another timetable", 5))));
    assert!(!cursor_is_expected(&r, None));
}
