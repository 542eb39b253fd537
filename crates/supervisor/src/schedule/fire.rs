//! Firing due occurrences, the "fire schedules" step of an EVAL: for each project with a
//! `schedule`, ask [`due`] what is due since the persisted cursor, and write it through
//! [`store::Store::fire_schedule`] — the run for the occurrence and the new cursor in one
//! transaction.
//!
//! The daemon's one EVAL loop is the one schedule runner of the install (the daemon lock makes
//! it so): with several runners, the first to sweep would mark an occurrence handled for all of
//! them while starting only its own. This step must never mark an occurrence handled without the
//! run row that handles it (the store writes both in one transaction), and never keeps a cursor
//! in memory: each EVAL starts from the persisted one.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use config::schedule::timetable::{due, timetable_key, Timetable};
use config::{Config, Overlap};
use store::{FireRequest, Millis, OverlapPolicy, Store, StoreError};

use crate::backoff::Backoff;

fn to_dt(ms: Millis) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// An instant as the log shows it (RFC 3339, UTC); empty for none.
fn shown(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| store::rfc3339(t.timestamp_millis()))
        .unwrap_or_default()
}

/// The warning logged when occurrences were missed (the daemon was down, the machine asleep, the
/// clock stepped), naming the rule that decided what became of the latest one: the project's
/// `starting_deadline` when it has one (`has_deadline`), within which the latest was fired
/// (`fired`) or past which it was skipped too; without one, the latest is fired however late.
fn missed_message(has_deadline: bool, fired: bool) -> &'static str {
    match (has_deadline, fired) {
        (false, _) => {
            "missed occurrences skipped (only the latest is fired: the project has no \
             starting_deadline, so it is fired however late)"
        }
        (true, true) => {
            "missed occurrences skipped (only the latest is fired: it is within starting_deadline)"
        }
        (true, false) => {
            "missed occurrences skipped (the latest too: it is later than starting_deadline)"
        }
    }
}

/// The schedules whose step failed on their own (one project's write refused, say by a trigger
/// another program put on the database), and when each is tried again. The daemon keeps it
/// across EVALs, so that one project's failure neither stops every other schedule and claim
/// (as an error of the whole step would) nor is retried, and logged, at every EVAL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireBackoff {
    /// By project: its back-off (when it is tried again, in milliseconds since the epoch, UTC;
    /// how many times in a row it failed), and the timetable that failed (an edit of it is
    /// tried at once). A back-off per project, not one for all: one project's failures must not
    /// hold another back, and an edited timetable starts its project's over.
    failing: BTreeMap<String, (Backoff<Millis>, String)>,
}

/// The first wait after a project's schedule step fails, in milliseconds; it doubles with each
/// failure in a row, up to [`FIRE_BACKOFF_MAX_MS`].
pub const FIRE_BACKOFF_FIRST_MS: Millis = 1_000;

/// The longest wait between two tries of a failing project's schedule step, in milliseconds.
pub const FIRE_BACKOFF_MAX_MS: Millis = 60_000;

/// The back-off of a project whose schedule step fails for the first time (or under an edited
/// timetable).
const fn fire_backoff() -> Backoff<Millis> {
    Backoff::new(
        std::time::Duration::from_millis(FIRE_BACKOFF_FIRST_MS as u64),
        std::time::Duration::from_millis(FIRE_BACKOFF_MAX_MS as u64),
    )
}

impl FireBackoff {
    /// The projects whose schedule step is failing, with the failures in a row of each.
    pub fn failing(&self) -> impl Iterator<Item = (&str, u32)> {
        self.failing
            .iter()
            .map(|(p, (retry, _))| (p.as_str(), retry.failures()))
    }
}

/// Whether a store error stops the whole step, rather than only the project it came from. Only
/// a refusal of the project's own rows (a constraint, a trigger: [`StoreError::is_refused_row`])
/// or of its own run's data is the project's; anything else — the database busy, full,
/// unreadable, read-only or unreachable, this daemon fenced — would fail every project alike.
fn stops_every_schedule(e: &StoreError) -> bool {
    let own = e.is_refused_row()
        || matches!(
            e,
            StoreError::Corrupt { .. }
                | StoreError::UnknownRun(_)
                | StoreError::IllegalTransition { .. }
        );
    !own
}

/// [`fire_due_with`] with no memory of earlier failures: a project whose step fails is logged
/// and skipped, and tried again at the next call.
///
/// Errors: as [`fire_due_with`].
pub fn fire_due(
    store: &Store,
    epoch: i64,
    config: &Config,
    now: Millis,
) -> Result<Option<Millis>, StoreError> {
    fire_due_with(store, epoch, config, now, &mut FireBackoff::default())
}

/// Fires what is due at `now` for every scheduled project; returns the earliest next
/// occurrence over all of them (or retry of a failing one), for the daemon's wake-up timer.
///
/// A project whose own write fails is logged (naming it and the error) and skipped, its
/// occurrence not marked handled: it is tried again from the same persisted cursor once its
/// wait in `backoff` is over (1 s, doubling to 60 s), while every other project goes on. It
/// leaves `backoff` when its step succeeds again.
///
/// Cost: one read of all cursors; a project whose next occurrence is still in the future costs
/// nothing more (its timetable is not even parsed).
///
/// Errors: every one but a project's own (see `stops_every_schedule`) — this daemon fenced, the
/// database busy, full, unreadable, read-only or unreachable: the same step is computed again at
/// the next EVAL, from the same persisted cursors, so nothing is fired twice or lost.
pub fn fire_due_with(
    store: &Store,
    epoch: i64,
    config: &Config,
    now: Millis,
    backoff: &mut FireBackoff,
) -> Result<Option<Millis>, StoreError> {
    let scheduled: Vec<_> = config
        .scheduled
        .iter()
        .filter_map(|name| config.projects.get(name))
        .collect();
    if scheduled.is_empty() {
        return Ok(None);
    }
    let rows: BTreeMap<String, store::ScheduleRow> = store
        .schedules()?
        .into_iter()
        .map(|r| (r.project.clone(), r))
        .collect();
    let mut wake: Option<Millis> = None;
    let mut note_wake = |at: Option<Millis>| {
        if let Some(at) = at {
            wake = Some(wake.map_or(at, |w: Millis| w.min(at)));
        }
    };
    // Projects no longer scheduled are forgotten.
    backoff
        .failing
        .retain(|name, _| scheduled.iter().any(|p| p.name == *name));
    for project in scheduled {
        let Some(expr) = project.schedule.as_deref() else {
            continue;
        };
        let key = timetable_key(expr, project.timezone.as_deref());
        // A project waiting out its backoff is skipped, unless its timetable changed since it
        // failed: an edit is what an operator does about it, and is tried at once.
        if let Some((retry, failed)) = backoff.failing.get(&project.name) {
            if !retry.is_due(now) && *failed == key {
                note_wake(retry.due());
                continue;
            }
        }
        let row = rows.get(&project.name).filter(|r| r.timetable == key);
        // A cursor ahead of the clock (the clock stepped back) has its next occurrence in the
        // future too, so it must not take this shortcut: `due` restarts it from the clock.
        if let Some(r) = row.filter(|r| !config::clock::ahead_of_clock(r.cursor, now)) {
            if let Some(next) = r.next_fire.filter(|next| *next > now) {
                note_wake(Some(next));
                continue;
            }
        }
        let timetable = match Timetable::new(expr, project.timezone.as_deref()) {
            Ok(t) => t,
            Err(e) => {
                // Validated at load, so this is a bug, not bad input; never panic over it.
                tracing::error!(project = %project.name, error = %e, "cannot use the schedule");
                continue;
            }
        };
        let cursor = row.map(|r| to_dt(r.cursor));
        let d = due(&timetable, cursor, to_dt(now), project.starting_deadline);
        let next = d.next.map(|t| t.timestamp_millis());
        note_wake(next);
        let unchanged = row
            .is_some_and(|r| r.cursor == d.cursor.timestamp_millis() && r.next_fire == next)
            && d.fire.is_none()
            && d.too_late.is_none()
            && d.clock_back.is_none();
        if unchanged {
            continue;
        }
        let too_late = d.too_late.map(|t| t.timestamp_millis());
        // The skip list and count include `too_late`; the store records that one on its own.
        let skipped: Vec<Millis> = d
            .skipped
            .iter()
            .map(|t| t.timestamp_millis())
            .filter(|t| Some(*t) != too_late)
            .collect();
        let skipped_count = d.skipped_count - u64::from(too_late.is_some());
        let req = FireRequest {
            project: project.name.clone(),
            namespace: project.namespace.clone(),
            timetable: key.clone(),
            expected_cursor: row.map(|r| r.cursor),
            cursor: d.cursor.timestamp_millis(),
            next_fire: next,
            fire: d.fire.map(|t| t.timestamp_millis()),
            skipped,
            skipped_first: d.skipped_first.map(|t| t.timestamp_millis()),
            skipped_count,
            skipped_count_at_least: !d.skipped_count_exact,
            too_late,
            overlap: match project.overlap {
                Overlap::Forbid => OverlapPolicy::Forbid,
                Overlap::Queue => OverlapPolicy::Queue,
                Overlap::Replace => OverlapPolicy::Replace,
            },
            max_parallel: project.max_parallel,
            clock_back_from: d.clock_back.map(|t| t.timestamp_millis()),
        };
        let fired = match store.fire_schedule(epoch, &req, now) {
            Ok(fired) => fired,
            Err(e) if stops_every_schedule(&e) => return Err(e),
            Err(e) => {
                let mut retry = backoff
                    .failing
                    .get(&project.name)
                    .filter(|f| f.1 == key)
                    .map_or(fire_backoff(), |f| f.0);
                let wait = retry.fail(now).as_millis() as Millis;
                let failures = retry.failures();
                note_wake(retry.due());
                backoff.failing.insert(project.name.clone(), (retry, key));
                tracing::error!(
                    project = %project.name,
                    error = %e,
                    failures,
                    retry_in_ms = wait,
                    "the schedule step failed for this project; its occurrence is not marked handled and is tried again, the other projects go on"
                );
                continue;
            }
        };
        // Said only when it is known: under the timetable that failed, or with a run written.
        // A step under an edited timetable with nothing due proves nothing either way (it
        // just leaves the backoff, and a refusal at its next occurrence starts it afresh).
        if let Some((retry, failed)) = backoff.failing.remove(&project.name) {
            let failures = retry.failures();
            if failed == key || d.fire.is_some() {
                tracing::info!(project = %project.name, failures, "the schedule step works again for this project");
            }
        }
        if let (Some(was), true) = (d.clock_back, fired.written) {
            tracing::error!(
                project = %project.name,
                last_handled = %shown(Some(was)),
                now = %store::rfc3339(now),
                behind_by = %humantime::format_duration(std::time::Duration::from_secs(
                    (was.timestamp_millis() - now).max(0) as u64 / 1000
                )),
                "the clock went back: the schedule's last occurrence handled is later than now; \
                 it resumes from the clock (an occurrence already handled never runs twice)"
            );
        }
        if skipped_count > 0 {
            tracing::warn!(
                project = %project.name,
                skipped = skipped_count,
                exact = d.skipped_count_exact,
                first = %shown(d.skipped_first),
                "{}",
                missed_message(project.starting_deadline.is_some(), d.fire.is_some())
            );
        }
        if let Some(late) = d.too_late {
            tracing::warn!(project = %project.name, occurrence = %shown(Some(late)), "occurrence missed by more than starting_deadline: skipped");
        }
        if let Some(id) = fired.queued {
            tracing::info!(project = %project.name, run = id, occurrence = %shown(d.fire), "schedule fired");
        } else if d.fire.is_some() && fired.written && fired.skipped_run.is_none() {
            // Its run exists already: typically an occurrence handled while the clock was
            // ahead, proposed again since the clock went back.
            tracing::info!(project = %project.name, occurrence = %shown(d.fire), "occurrence already has its run: not run again");
        }
        if let (Some(id), None) = (fired.skipped_run, d.too_late) {
            tracing::info!(project = %project.name, run = id, "occurrence skipped: overlap forbid");
        }
        if let Some(id) = fired.replaced {
            tracing::info!(project = %project.name, run = id, "overlap replace: cancelling the active run");
        }
    }
    Ok(wake)
}
