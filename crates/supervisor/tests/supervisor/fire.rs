//! The "fire schedules" step of an EVAL (`schedule::fire_due`) against a real store, with the
//! clock injected: a new schedule is armed without firing the past, a due occurrence makes
//! exactly one run, a second pass at the same instant makes none, a schedule not yet due costs
//! nothing and says when it is, a late occurrence is recorded as skipped, the warning on missed
//! occurrences names the rule that applied, a changed timetable starts afresh, and the earliest
//! next occurrence of all projects wakes the daemon.

use std::path::Path;
use std::time::Duration;

use config::Config;
use store::{Millis, RunFilter, RunStatus, Store, Trigger};
use supervisor::schedule::{fire_due, fire_due_with, FireBackoff};

/// 2024-01-01T00:00:00Z, in milliseconds.
const T0: Millis = 1_704_067_200_000;
const S: Millis = 1_000;

struct Setup {
    _dir: tempfile::TempDir,
    store: Store,
    epoch: i64,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("fleet.db"), Duration::from_secs(1)).unwrap();
    let epoch = store.take_over("local", 1, "fleet.toml", "{}", T0).unwrap();
    Setup {
        _dir: dir,
        store,
        epoch,
    }
}

fn config(text: &str) -> Config {
    Config::parse(text, Path::new("/nonexistent/fleet.toml")).unwrap()
}

/// Every ten seconds; a second project every minute, at second 30.
const TWO: &str = "[projects.ten]\ncommand = [\"true\"]\nschedule = \"*/10 * * * * *\"\n\
                   [projects.minute]\ncommand = [\"true\"]\nschedule = \"30 * * * * *\"\n\
                   [projects.manual]\ncommand = [\"true\"]\n";

fn runs_of(s: &Store, project: &str) -> Vec<store::Run> {
    let mut runs: Vec<store::Run> = s
        .list_runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .filter(|r| r.project == project)
        .collect();
    runs.sort_by_key(|r| r.id);
    runs
}

fn cursor_of(s: &Store, project: &str) -> Option<Millis> {
    s.schedules()
        .unwrap()
        .into_iter()
        .find(|r| r.project == project)
        .map(|r| r.cursor)
}

#[test]
fn a_new_schedule_is_armed_without_firing_the_past() {
    let s = setup();
    let c = config(TWO);
    let wake = fire_due(&s.store, s.epoch, &c, T0 + 3 * S + 400).unwrap();
    // Armed at now (to the second): the next occurrences are 10 s and 30 s.
    assert_eq!(
        wake,
        Some(T0 + 10 * S),
        "the earliest next occurrence wakes the daemon"
    );
    assert_eq!(cursor_of(&s.store, "ten"), Some(T0 + 3 * S));
    assert_eq!(cursor_of(&s.store, "minute"), Some(T0 + 3 * S));
    assert_eq!(cursor_of(&s.store, "manual"), None, "not scheduled");
    assert!(s.store.list_runs(&RunFilter::default()).unwrap().is_empty());
}

#[test]
fn a_due_occurrence_fires_once() {
    let s = setup();
    let c = config(TWO);
    fire_due(&s.store, s.epoch, &c, T0).unwrap();
    // Not yet due: nothing, and the wake-up says when.
    assert_eq!(
        fire_due(&s.store, s.epoch, &c, T0 + 9 * S).unwrap(),
        Some(T0 + 10 * S)
    );
    assert!(runs_of(&s.store, "ten").is_empty());

    let wake = fire_due(&s.store, s.epoch, &c, T0 + 10 * S).unwrap();
    let runs = runs_of(&s.store, "ten");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].occurrence, Some(T0 + 10 * S));
    assert_eq!(runs[0].trigger, Trigger::Schedule);
    assert_eq!(runs[0].status, RunStatus::Queued);
    assert_eq!(runs[0].reason, None);
    assert_eq!(cursor_of(&s.store, "ten"), Some(T0 + 10 * S));
    assert_eq!(wake, Some(T0 + 20 * S), "ten's next occurrence");

    // The same instant again, and a later one before the next occurrence: nothing more.
    fire_due(&s.store, s.epoch, &c, T0 + 10 * S).unwrap();
    fire_due(&s.store, s.epoch, &c, T0 + 19 * S).unwrap();
    assert_eq!(runs_of(&s.store, "ten").len(), 1);
    assert!(runs_of(&s.store, "minute").is_empty());
    assert!(runs_of(&s.store, "manual").is_empty());
}

#[test]
fn missed_occurrences_fire_the_latest_and_count_the_others() {
    let s = setup();
    let c = config(TWO);
    fire_due(&s.store, s.epoch, &c, T0).unwrap();
    // 10, 20, 30 and 40 s were missed: 40 s fires, three are skipped.
    fire_due(&s.store, s.epoch, &c, T0 + 45 * S).unwrap();
    let runs = runs_of(&s.store, "ten");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].occurrence, Some(T0 + 40 * S));
    let reason = runs[0].reason.clone().unwrap_or_default();
    assert!(reason.starts_with("3 earlier occurrence(s)"), "{reason}");
    let row = s
        .store
        .schedules()
        .unwrap()
        .into_iter()
        .find(|r| r.project == "ten")
        .unwrap();
    assert_eq!(row.cursor, T0 + 40 * S);
    assert_eq!(row.skipped_total, 3);
    assert_eq!(row.next_fire, Some(T0 + 50 * S));
    // minute's 30 s occurrence fired in the same pass.
    assert_eq!(runs_of(&s.store, "minute").len(), 1);
}

/// Past 1,102 missed occurrences the scheduler stops counting them: the count it gives is then
/// a lower bound, and the run's note says "at least" rather than passing it off as exact.
#[test]
fn a_count_of_missed_occurrences_past_the_cap_is_said_to_be_a_lower_bound() {
    let s = setup();
    let c = config(TWO);
    fire_due(&s.store, s.epoch, &c, T0).unwrap();
    // Five hours of ten-second occurrences: 1,799 missed before the one that fires.
    fire_due(&s.store, s.epoch, &c, T0 + 5 * 3600 * S + 5 * S).unwrap();
    let runs = runs_of(&s.store, "ten");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let reason = runs[0].reason.clone().unwrap_or_default();
    let counted: u64 = reason
        .strip_prefix("at least ")
        .unwrap_or_else(|| panic!("no \"at least\": {reason}"))
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count: {reason}"));
    assert!((1..=1799).contains(&counted), "{reason}");
    // Under the cap, the count is exact and said plainly (the test above).
}

/// The note of the run fired after `skipped` missed occurrences of a per-second schedule, and
/// the schedule's skipped total.
fn note_after_missing(skipped: i64) -> (String, i64) {
    let s = setup();
    let c = config("[projects.sec]\ncommand = [\"true\"]\nschedule = \"* * * * * *\"\n");
    fire_due(&s.store, s.epoch, &c, T0).unwrap();
    // Occurrences at 1 s ..= skipped + 1 s: the last fires, the others were missed.
    fire_due(&s.store, s.epoch, &c, T0 + (skipped + 1) * S).unwrap();
    let runs = runs_of(&s.store, "sec");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].occurrence, Some(T0 + (skipped + 1) * S));
    let row = s.store.schedules().unwrap().remove(0);
    (
        runs[0].reason.clone().unwrap_or_default(),
        row.skipped_total,
    )
}

/// At exactly the most the scheduler counts, the count is exact and said plainly; one past it,
/// the note says "at least" that bound plus one, which is true.
#[test]
fn a_count_of_missed_occurrences_at_the_bound_is_exact_and_one_past_it_is_not() {
    use config::schedule::timetable::SKIP_COUNT_EXACT_MAX as MAX;
    let (note, total) = note_after_missing(MAX as i64);
    assert!(
        note.starts_with(&format!("{MAX} earlier occurrence(s) missed and skipped")),
        "{note}"
    );
    assert_eq!(total, MAX as i64);
    let (note, total) = note_after_missing(MAX as i64 + 1);
    assert!(
        note.starts_with(&format!(
            "at least {} earlier occurrence(s) missed and skipped",
            MAX + 1
        )),
        "{note}"
    );
    assert_eq!(total, MAX as i64 + 1);
}

/// What `f` logs at WARN and above, as text.
fn warnings(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = capture.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

/// The warning on missed occurrences says which rule decided what became of the latest one:
/// `starting_deadline` only for a project that has one.
#[test]
fn the_missed_occurrences_warning_names_the_rule_that_applied() {
    // No starting_deadline: the latest runs however late.
    let s = setup();
    let c = config(TWO);
    fire_due(&s.store, s.epoch, &c, T0).unwrap();
    let said = warnings(|| {
        fire_due(&s.store, s.epoch, &c, T0 + 45 * S).unwrap();
    });
    let line = said
        .lines()
        .find(|l| l.contains("missed occurrences skipped") && l.contains("project=ten"))
        .unwrap_or_else(|| panic!("no warning on the missed occurrences:\n{said}"));
    assert!(!line.contains("within starting_deadline"), "{line}");
    assert!(line.contains("no starting_deadline"), "{line}");
    assert!(line.contains("however late"), "{line}");
    assert_eq!(runs_of(&s.store, "ten").len(), 1, "the latest ran");

    // With one, within it and past it.
    for (now, fired, rule) in [
        (T0 + 42 * S, true, "within starting_deadline"),
        (T0 + 47 * S, false, "later than starting_deadline"),
    ] {
        let s = setup();
        let c = config(
            "[projects.ten]\ncommand = [\"true\"]\nschedule = \"*/10 * * * * *\"\n\
             starting_deadline = \"5s\"\n",
        );
        fire_due(&s.store, s.epoch, &c, T0).unwrap();
        let said = warnings(|| {
            fire_due(&s.store, s.epoch, &c, now).unwrap();
        });
        let line = said
            .lines()
            .find(|l| l.contains("missed occurrences skipped"))
            .unwrap_or_else(|| panic!("no warning on the missed occurrences:\n{said}"));
        assert!(line.contains(rule), "{line}");
        assert_eq!(line.contains("only the latest is fired"), fired, "{line}");
    }
}

#[test]
fn an_occurrence_later_than_the_starting_deadline_is_recorded_as_skipped() {
    let s = setup();
    let c = config(
        "[projects.ten]\ncommand = [\"true\"]\nschedule = \"*/10 * * * * *\"\n\
         starting_deadline = \"5s\"\n",
    );
    fire_due(&s.store, s.epoch, &c, T0).unwrap();
    fire_due(&s.store, s.epoch, &c, T0 + 17 * S).unwrap();
    let runs = runs_of(&s.store, "ten");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].status, RunStatus::Cancelled, "{runs:?}");
    assert_eq!(runs[0].occurrence, Some(T0 + 10 * S));
    assert!(
        runs[0]
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("starting_deadline"),
        "{runs:?}"
    );
    assert_eq!(cursor_of(&s.store, "ten"), Some(T0 + 10 * S));
    // Within the deadline, the next one runs.
    fire_due(&s.store, s.epoch, &c, T0 + 24 * S).unwrap();
    let runs = runs_of(&s.store, "ten");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[1].status, RunStatus::Queued);
    assert_eq!(runs[1].occurrence, Some(T0 + 20 * S));
}

/// Too late, with earlier occurrences missed too: one skip row for the latest, carrying the
/// count and range of the earlier ones; every one of them counted in the schedule's total.
#[test]
fn a_late_occurrence_counts_the_earlier_ones_it_skipped_with() {
    let s = setup();
    let c = config(
        "[projects.ten]\ncommand = [\"true\"]\nschedule = \"*/10 * * * * *\"\n\
         starting_deadline = \"5s\"\n",
    );
    fire_due(&s.store, s.epoch, &c, T0).unwrap();
    // 10, 20 and 30 s missed; 30 s is 7 s late: nothing runs.
    fire_due(&s.store, s.epoch, &c, T0 + 37 * S).unwrap();
    let runs = runs_of(&s.store, "ten");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].status, RunStatus::Cancelled);
    assert_eq!(runs[0].occurrence, Some(T0 + 30 * S));
    let reason = runs[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains("2 earlier occurrence(s) missed and skipped"),
        "{reason}"
    );
    assert!(
        reason.contains(&store::rfc3339(T0 + 10 * S))
            && reason.contains(&store::rfc3339(T0 + 20 * S)),
        "the range of the earlier ones: {reason}"
    );
    let row = s.store.schedules().unwrap().remove(0);
    assert_eq!(row.skipped_total, 3);
    assert_eq!(row.cursor, T0 + 30 * S);
}

#[test]
fn a_changed_timetable_starts_afresh() {
    let s = setup();
    fire_due(&s.store, s.epoch, &config(TWO), T0).unwrap();
    // ten now fires every 15 s: its old cursor belonged to another timetable, so it is armed
    // again at now, and nothing fires for the past.
    let changed = config(
        "[projects.ten]\ncommand = [\"true\"]\nschedule = \"*/15 * * * * *\"\n\
         [projects.minute]\ncommand = [\"true\"]\nschedule = \"30 * * * * *\"\n",
    );
    let wake = fire_due(&s.store, s.epoch, &changed, T0 + 12 * S).unwrap();
    assert!(runs_of(&s.store, "ten").is_empty());
    assert_eq!(cursor_of(&s.store, "ten"), Some(T0 + 12 * S));
    assert_eq!(wake, Some(T0 + 15 * S));
    fire_due(&s.store, s.epoch, &changed, T0 + 15 * S).unwrap();
    assert_eq!(
        runs_of(&s.store, "ten")
            .iter()
            .map(|r| r.occurrence)
            .collect::<Vec<_>>(),
        [Some(T0 + 15 * S)]
    );
}

#[test]
fn no_scheduled_project_reads_nothing_and_wakes_nobody() {
    let s = setup();
    let c = config("[projects.manual]\ncommand = [\"true\"]\n");
    assert_eq!(fire_due(&s.store, s.epoch, &c, T0).unwrap(), None);
    assert!(s.store.schedules().unwrap().is_empty());
}

#[test]
fn a_stale_epoch_fires_nothing() {
    let s = setup();
    let c = config(TWO);
    fire_due(&s.store, s.epoch, &c, T0).unwrap();
    let newer = s
        .store
        .take_over("local", 2, "fleet.toml", "{}", T0)
        .unwrap();
    assert!(newer > s.epoch);
    assert!(fire_due(&s.store, s.epoch, &c, T0 + 10 * S).is_err());
    assert!(runs_of(&s.store, "ten").is_empty());
    fire_due(&s.store, newer, &c, T0 + 10 * S).unwrap();
    assert_eq!(runs_of(&s.store, "ten").len(), 1);
}

/// Two projects, `bad` and `good`, every ten seconds, both armed at `T0` (no run yet), with the
/// backoff that arming left (empty).
fn bad_and_good_armed() -> (Setup, Config, FireBackoff) {
    let s = setup();
    let c = config(
        "[projects.bad]\ncommand = [\"true\"]\nschedule = \"*/10 * * * * *\"\n\
         [projects.good]\ncommand = [\"true\"]\nschedule = \"*/10 * * * * *\"\n",
    );
    let mut backoff = FireBackoff::default();
    fire_due_with(&s.store, s.epoch, &c, T0, &mut backoff).unwrap();
    (s, c, backoff)
}

/// Another program's trigger that refuses every new run of project `bad` (or, with `false`,
/// drops it).
fn refuse_runs_of_bad(db: &Path, refuse: bool) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let sql = if refuse {
        "CREATE TRIGGER refuse_bad BEFORE INSERT ON runs WHEN NEW.project = 'bad' \
         BEGIN SELECT RAISE(ABORT, 'refused by another program'); END"
    } else {
        "DROP TRIGGER refuse_bad"
    };
    conn.execute_batch(sql).unwrap();
}

/// One project whose own write fails (here: another program's trigger refuses its runs) does
/// not stop the others: they fire as usual, while it is tried again after a wait that doubles,
/// its occurrence not marked handled; once its write works again, that occurrence gets its run.
#[test]
fn one_projects_failure_leaves_the_others_firing() {
    use supervisor::schedule::FIRE_BACKOFF_FIRST_MS;
    let (s, c, mut backoff) = bad_and_good_armed();
    let (store, epoch, db) = (&s.store, s.epoch, s._dir.path().join("fleet.db"));
    refuse_runs_of_bad(&db, true);

    // `bad` sorts first: its failure must not keep `good` from firing.
    let now = T0 + 10 * S;
    let wake = fire_due_with(store, epoch, &c, now, &mut backoff).unwrap();
    assert_eq!(runs_of(store, "good").len(), 1);
    assert!(runs_of(store, "bad").is_empty());
    assert_eq!(backoff.failing().collect::<Vec<_>>(), [("bad", 1)]);
    assert_eq!(
        wake,
        Some(now + FIRE_BACKOFF_FIRST_MS),
        "woken to try again"
    );
    assert_eq!(
        cursor_of(store, "bad"),
        Some(T0),
        "its occurrence is not marked handled"
    );

    // Within its wait it is not tried again; after it, it is, and the wait doubles.
    fire_due_with(
        store,
        epoch,
        &c,
        now + FIRE_BACKOFF_FIRST_MS / 2,
        &mut backoff,
    )
    .unwrap();
    assert_eq!(backoff.failing().collect::<Vec<_>>(), [("bad", 1)]);
    let later = now + FIRE_BACKOFF_FIRST_MS;
    let wake = fire_due_with(store, epoch, &c, later, &mut backoff).unwrap();
    assert_eq!(backoff.failing().collect::<Vec<_>>(), [("bad", 2)]);
    assert_eq!(wake, Some(later + 2 * FIRE_BACKOFF_FIRST_MS));

    // Working again: the occurrence it missed gets its run, and it leaves the backoff.
    refuse_runs_of_bad(&db, false);
    fire_due_with(
        store,
        epoch,
        &c,
        later + 2 * FIRE_BACKOFF_FIRST_MS,
        &mut backoff,
    )
    .unwrap();
    assert_eq!(backoff.failing().count(), 0);
    let bad = runs_of(store, "bad");
    assert_eq!(
        bad.iter().map(|r| r.occurrence).collect::<Vec<_>>(),
        [Some(now)]
    );
    assert_eq!(runs_of(store, "good").len(), 1);
}

/// A failing project whose timetable is edited is tried at once under the new one, not after
/// the rest of its wait: an edit is what an operator does about a failing schedule.
#[test]
fn an_edited_timetable_is_tried_before_the_backoff_ends() {
    use supervisor::schedule::FIRE_BACKOFF_FIRST_MS;
    let (s, c, mut backoff) = bad_and_good_armed();
    let (store, epoch, db) = (&s.store, s.epoch, s._dir.path().join("fleet.db"));
    refuse_runs_of_bad(&db, true);
    let now = T0 + 10 * S;
    fire_due_with(store, epoch, &c, now, &mut backoff).unwrap();
    assert_eq!(backoff.failing().collect::<Vec<_>>(), [("bad", 1)]);

    // Within the wait, under a new timetable (once a year: nothing is due under it).
    let edited = config(
        "[projects.bad]\ncommand = [\"true\"]\nschedule = \"0 0 1 1 *\"\n\
         [projects.good]\ncommand = [\"true\"]\nschedule = \"*/10 * * * * *\"\n",
    );
    fire_due_with(
        store,
        epoch,
        &edited,
        now + FIRE_BACKOFF_FIRST_MS / 2,
        &mut backoff,
    )
    .unwrap();
    assert_eq!(backoff.failing().count(), 0, "tried at once, and it worked");
    let row = store
        .schedules()
        .unwrap()
        .into_iter()
        .find(|r| r.project == "bad")
        .unwrap();
    assert!(row.timetable.starts_with("0 0 1 1 *"), "{row:?}");
    assert!(runs_of(store, "bad").is_empty());
}

/// An error that is not a refusal of the project's own rows stops the whole step, as before
/// per-project backoff: here a trigger another program broke (it reads a table that does not
/// exist), which SQLite reports as a plain error, as it would a full or unreadable database.
#[test]
fn an_error_of_the_database_stops_every_schedule() {
    let (s, c, mut backoff) = bad_and_good_armed();
    let (store, epoch, db) = (&s.store, s.epoch, s._dir.path().join("fleet.db"));
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE gone (x); CREATE TRIGGER broken BEFORE INSERT ON runs \
             WHEN NEW.project = 'bad' BEGIN SELECT x FROM gone; END; DROP TABLE gone",
        )
        .unwrap();
    let err = fire_due_with(store, epoch, &c, T0 + 10 * S, &mut backoff).unwrap_err();
    assert!(!err.is_refused_row(), "{err}");
    assert_eq!(backoff.failing().count(), 0);
    assert!(
        runs_of(store, "good").is_empty(),
        "the step stopped at its first project"
    );
}
