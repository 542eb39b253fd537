//! What firing a schedule step writes, once the backend has found the stored cursor where the
//! step expects it: the occurrence's run (queued, or recorded as a skip because its project is
//! paused or overlap = "forbid" finds its seats full), the active run overlap = "replace" stops,
//! the occurrence missed by more than `starting_deadline`, the note on missed occurrences, and
//! the totals the cursor row keeps.
//!
//! The rule lives here once; a backend supplies the reads and writes it is made of
//! ([`FireSteps`]), each one SQL statement of its dialect run in the transaction that also
//! moves the cursor. An occurrence is "handled" only when its run row exists: nothing here may
//! mark one handled without [`FireSteps::insert_unique`] having made (or found) its run.

use crate::decide::cancel::CancelWrites;
use crate::error::Result;
use crate::{FireRequest, Fired, HoldKind, Millis, NewRun, OverlapPolicy, RunId, Trigger};

/// The reads and writes one fire step is made of, on the backend's transaction (with the
/// cancel's writes: a skip ends its run at once, a replace requests the active run's stop).
pub(crate) trait FireSteps: CancelWrites {
    /// The project's queued and active runs with their status (as stored, e.g. `"running"`),
    /// the active ones first, oldest first.
    fn queued_and_active(&mut self, project: &str) -> Result<Vec<(RunId, String)>>;
    /// What pause holds the project, if any.
    fn held_by(&mut self, project: &str, namespace: &str) -> Result<Option<HoldKind>>;
    /// Inserts `new` (attempt 1) unless its occurrence already has its run; the new id, or
    /// `None` when it was handled before. Decided by reading the row, never by reading an
    /// error: a failed insert rolls the whole step back, cursor included, so the occurrence
    /// fires again later instead of being marked handled with no run.
    fn insert_unique(&mut self, new: &NewRun, now: Millis) -> Result<Option<RunId>>;
    /// Sets the run's `reason` to `note`.
    fn set_reason(&mut self, id: RunId, note: &str) -> Result<()>;
}

/// What the cursor row of the schedule adds up after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Occurrences skipped by this step (added to `skipped_total` under the same timetable).
    pub(crate) skipped_now: i64,
    /// The latest occurrence this step skipped, if any (ms UTC).
    pub(crate) last_skipped: Option<Millis>,
}

/// Whether fire step `req` may go on, given the cursor stored for its project (`stored`: its
/// timetable and cursor, read in the step's transaction): only when it is the cursor the
/// caller computed from (`req.expected_cursor`). A cursor stored under another timetable counts
/// as none (a new timetable starts afresh). When not, the step writes nothing: another runner,
/// or an earlier pass, has moved the cursor since.
pub(crate) fn cursor_is_expected(req: &FireRequest, stored: Option<(&str, Millis)>) -> bool {
    let current = stored
        .filter(|(timetable, _)| *timetable == req.timetable)
        .map(|(_, cursor)| cursor);
    current == req.expected_cursor
}

/// Writes the runs of one fire step `req` through `steps` (the cursor check already passed) and
/// returns what it did, `written` set, and the totals for the cursor row. Errors: any of the
/// steps'; the caller's transaction then rolls back, cursor included.
pub(crate) fn fire(
    steps: &mut impl FireSteps,
    req: &FireRequest,
    now: Millis,
) -> Result<(Fired, Totals)> {
    let mut out = Fired {
        written: true,
        ..Fired::default()
    };
    let note = skipped_note(req);
    let with_note = |reason: String| match &note {
        Some(n) => format!("{reason}; {n}"),
        None => reason,
    };
    if let Some(occurrence) = req.fire {
        // Under `overlap = "queue"` nothing depends on the runs already there: not read, so
        // that a fire costs the same however long the project's queue has grown.
        let others = if req.overlap == OverlapPolicy::Queue {
            Vec::new()
        } else {
            steps.queued_and_active(&req.project)?
        };
        let held = steps.held_by(&req.project, &req.namespace)?;
        let new = occurrence_run(req, occurrence);
        match overlap_skip(req, &others, held) {
            Some(reason) => {
                out.skipped_run = insert_skip(steps, &new, &with_note(reason), now)?;
            }
            None => {
                out.queued = steps.insert_unique(&new, now)?;
                // Only an occurrence that got its run here may replace anything: one that had its
                // run already (proposed again after the clock stepped back) must not stop the
                // active run.
                if let (Some(_), Some(id)) = (out.queued, to_replace(req, &others)) {
                    let why = format!(
                        "replaced by the occurrence at {} (overlap = \"replace\")",
                        crate::rfc3339(occurrence)
                    );
                    steps.request_stop(id, &why, now)?;
                    out.replaced = Some(id);
                }
                if let (Some(id), Some(n)) = (out.queued, &note) {
                    steps.set_reason(id, n)?;
                }
            }
        }
    }
    if let Some(late) = req.too_late {
        let reason = with_note("skipped: missed by more than starting_deadline".to_string());
        out.skipped_run = insert_skip(steps, &occurrence_run(req, late), &reason, now)?;
    }
    let totals = Totals {
        skipped_now: req.skipped_count as i64
            + i64::from(req.too_late.is_some())
            + i64::from(out.skipped_run.is_some() && req.too_late.is_none()),
        last_skipped: req.too_late.or(req.skipped.last().copied()),
    };
    Ok((out, totals))
}

/// The run of `occurrence` (ms UTC) of `req`'s project.
fn occurrence_run(req: &FireRequest, occurrence: Millis) -> NewRun {
    NewRun {
        project: req.project.clone(),
        namespace: req.namespace.clone(),
        priority: 0,
        trigger: Trigger::Schedule,
        occurrence: Some(occurrence),
        not_before: 0,
        ..Default::default()
    }
}

/// The note on the occurrences missed before this one, if any. The range starts at the first
/// occurrence skipped, which the list (the latest hundred) may not hold.
pub(crate) fn skipped_note(req: &FireRequest) -> Option<String> {
    if req.skipped_count == 0 {
        return None;
    }
    let first = req
        .skipped_first
        .or(req.skipped.first().copied())
        .map(crate::rfc3339)
        .unwrap_or_default();
    let last = req
        .skipped
        .last()
        .copied()
        .map(crate::rfc3339)
        .unwrap_or_default();
    let at_least = if req.skipped_count_at_least {
        "at least "
    } else {
        ""
    };
    Some(format!(
        "{at_least}{} earlier occurrence(s) missed and skipped ({first} .. {last})",
        req.skipped_count
    ))
}

/// Why the occurrence is skipped rather than queued, if it is: its project or namespace is
/// paused (`held`), or overlap = "forbid" and the project's queued and active runs (`others`,
/// active first, oldest first) fill its seats — with one seat, "any run queued or active".
pub(crate) fn overlap_skip(
    req: &FireRequest,
    others: &[(RunId, String)],
    held: Option<HoldKind>,
) -> Option<String> {
    if let Some(kind) = held {
        let name = match kind {
            HoldKind::Project => &req.project,
            HoldKind::Namespace => &req.namespace,
        };
        return Some(format!("skipped: paused ({kind} {name})"));
    }
    let seats = seats(req);
    match (req.overlap, others.first()) {
        (OverlapPolicy::Forbid, Some((id, status))) if others.len() >= seats => {
            Some(if seats == 1 {
                format!("skipped: overlap = \"forbid\" and run {id} of this project is {status}")
            } else {
                format!(
                "skipped: overlap = \"forbid\" and {} runs of this project are queued or active (max_parallel = {seats})",
                others.len()
            )
            })
        }
        _ => None,
    }
}

/// The active run overlap = "replace" stops, if any: the oldest active one, once the active
/// runs fill the project's seats.
pub(crate) fn to_replace(req: &FireRequest, others: &[(RunId, String)]) -> Option<RunId> {
    if req.overlap != OverlapPolicy::Replace {
        return None;
    }
    let active = others.iter().filter(|(_, st)| st != "queued").count();
    match others.first() {
        Some((id, status)) if active >= seats(req) && status != "queued" => Some(*id),
        _ => None,
    }
}

/// The project's seats: `max_parallel`, at least one.
fn seats(req: &FireRequest) -> usize {
    req.max_parallel.max(1) as usize
}

/// Records a skipped occurrence as a `cancelled` run carrying `reason`: it marks the occurrence
/// handled (unique key) and shows the skip in `fleet runs`. `None` when it had its run already.
fn insert_skip(
    steps: &mut impl FireSteps,
    new: &NewRun,
    reason: &str,
    now: Millis,
) -> Result<Option<RunId>> {
    let Some(id) = steps.insert_unique(new, now)? else {
        return Ok(None);
    };
    // Just inserted, so still queued: the same ending as any queued run's cancel.
    steps.cancel_if_queued(id, reason, now)?;
    Ok(Some(id))
}

#[cfg(test)]
mod tests;
