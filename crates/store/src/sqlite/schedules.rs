//! Schedule cursors and firing occurrences, for SQLite.
//!
//! An occurrence is "handled" only when a run row for it exists, inserted in the same
//! transaction that advances the persisted cursor, under the unique key (project, occurrence):
//! a runner that marked an occurrence handled without making its run would have the schedule
//! claim to fire while nothing starts. Nothing here may move a cursor without that insert.

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::daemon::check_epoch;
use super::paused::held_by;
use super::runs::{cancel_if_queued, insert_run};
use super::SqliteStore;
use crate::error::Result;
use crate::{
    ClockBack, FireRequest, Fired, HoldKind, Millis, NewRun, OverlapPolicy, RunId, ScheduleRow,
    Trigger,
};

impl SqliteStore {
    /// [`crate::Store::schedules`].
    pub(crate) fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT project, timetable, cursor, next_fire, skipped_total, last_skipped, \
               clock_back_at, clock_back_cursor FROM schedules ORDER BY project",
        )?;
        let rows = stmt.query_map([], |r| {
            let seen_at: Option<Millis> = r.get(6)?;
            let cursor_was: Option<Millis> = r.get(7)?;
            Ok(ScheduleRow {
                project: r.get(0)?,
                timetable: r.get(1)?,
                cursor: r.get(2)?,
                next_fire: r.get(3)?,
                skipped_total: r.get(4)?,
                last_skipped: r.get(5)?,
                clock_back: seen_at
                    .zip(cursor_was)
                    .map(|(seen_at, cursor_was)| ClockBack {
                        seen_at,
                        cursor_was,
                    }),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// [`crate::Store::fire_schedule`]: the cursor check, the occurrence's run (or its
    /// skip) and the new cursor in one `BEGIN IMMEDIATE` transaction.
    pub(crate) fn fire_schedule(
        &self,
        epoch: i64,
        req: &FireRequest,
        now: Millis,
    ) -> Result<Fired> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_epoch(&tx, epoch)?;
        let stored: Option<(String, Millis)> = tx
            .prepare_cached("SELECT timetable, cursor FROM schedules WHERE project = ?1")?
            .query_row([&req.project], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let current = stored
            .filter(|(tt, _)| *tt == req.timetable)
            .map(|(_, c)| c);
        if current != req.expected_cursor {
            return Ok(Fired::default());
        }
        let mut out = Fired {
            written: true,
            ..Fired::default()
        };
        let skipped_note = if req.skipped_count > 0 {
            // The range starts at the first occurrence skipped, which the list (the latest
            // hundred) may not hold.
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
            Some(format!(
                "{} earlier occurrence(s) missed and skipped ({first} .. {last})",
                req.skipped_count
            ))
        } else {
            None
        };
        if let Some(occurrence) = req.fire {
            // The project's queued and active runs, the active ones first, oldest first.
            let others: Vec<(RunId, String)> = tx
                .prepare_cached(
                    "SELECT id, status FROM runs WHERE project = ?1 AND status IN ('queued','starting','running') \
                     ORDER BY status = 'queued', id",
                )?
                .query_map([&req.project], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let seats = req.max_parallel.max(1) as usize;
            let active = others.iter().filter(|(_, st)| st != "queued").count();
            // Forbid skips once the project's queued and active runs fill its seats; replace
            // stops the oldest active run once the active ones fill them. With one seat, that is
            // "any run queued or active" and "the active run".
            let blocking = (others.len() >= seats).then(|| others[0].clone());
            let to_replace = (active >= seats).then(|| others[0].clone());
            let held = held_by(&tx, &req.project, &req.namespace)?;
            let new = NewRun {
                project: req.project.clone(),
                namespace: req.namespace.clone(),
                priority: 0,
                trigger: Trigger::Schedule,
                occurrence: Some(occurrence),
                not_before: 0,
                ..Default::default()
            };
            match (req.overlap, blocking) {
                _ if held.is_some() => {
                    let kind = held.unwrap_or(HoldKind::Project);
                    let name = match kind {
                        HoldKind::Project => &req.project,
                        HoldKind::Namespace => &req.namespace,
                    };
                    let mut reason = format!("skipped: paused ({kind} {name})");
                    if let Some(note) = &skipped_note {
                        reason = format!("{reason}; {note}");
                    }
                    out.skipped_run = insert_skip(&tx, &new, &reason, now)?;
                }
                (OverlapPolicy::Forbid, Some((id, status))) => {
                    let mut reason = if seats == 1 {
                        format!(
                            "skipped: overlap = \"forbid\" and run {id} of this project is {status}"
                        )
                    } else {
                        format!(
                            "skipped: overlap = \"forbid\" and {} runs of this project are queued or active (max_parallel = {seats})",
                            others.len()
                        )
                    };
                    if let Some(note) = &skipped_note {
                        reason = format!("{reason}; {note}");
                    }
                    out.skipped_run = insert_skip(&tx, &new, &reason, now)?;
                }
                (policy, _) => {
                    out.queued = insert_unique(&tx, &new, now)?;
                    // Only an occurrence that got its run here may replace anything: one that
                    // had its run already (proposed again after the clock stepped back) must not
                    // stop the active run.
                    if let (OverlapPolicy::Replace, Some((id, status)), Some(_)) =
                        (policy, &to_replace, out.queued)
                    {
                        if status != "queued" {
                            let why = format!(
                                "replaced by the occurrence at {} (overlap = \"replace\")",
                                crate::rfc3339(occurrence)
                            );
                            super::runs::request_stop(&tx, *id, &why, now)?;
                            out.replaced = Some(*id);
                        }
                    }
                    if let (Some(id), Some(note)) = (out.queued, &skipped_note) {
                        tx.execute(
                            "UPDATE runs SET reason = ?2 WHERE id = ?1",
                            params![id, note],
                        )?;
                    }
                }
            }
        }
        if let Some(late) = req.too_late {
            let new = NewRun {
                project: req.project.clone(),
                namespace: req.namespace.clone(),
                priority: 0,
                trigger: Trigger::Schedule,
                occurrence: Some(late),
                not_before: 0,
                ..Default::default()
            };
            let mut reason = "skipped: missed by more than starting_deadline".to_string();
            if let Some(note) = &skipped_note {
                reason = format!("{reason}; {note}");
            }
            out.skipped_run = insert_skip(&tx, &new, &reason, now)?;
        }
        let skipped_now = req.skipped_count as i64
            + i64::from(req.too_late.is_some())
            + i64::from(out.skipped_run.is_some() && req.too_late.is_none());
        let last_skipped = req.too_late.or(req.skipped.last().copied());
        // The record of the clock found behind the cursor is kept until the next one, or until
        // the timetable changes (a new timetable starts afresh).
        tx.execute(
            "INSERT INTO schedules (project, timetable, cursor, next_fire, skipped_total, last_skipped, \
               updated_at, clock_back_at, clock_back_cursor) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, CASE WHEN ?8 IS NULL THEN NULL ELSE ?7 END, ?8) \
             ON CONFLICT (project) DO UPDATE SET timetable = ?2, cursor = ?3, next_fire = ?4, \
               skipped_total = CASE WHEN timetable = ?2 THEN skipped_total + ?5 ELSE ?5 END, \
               last_skipped = COALESCE(?6, last_skipped), updated_at = ?7, \
               clock_back_at = CASE WHEN ?8 IS NOT NULL THEN ?7 \
                 WHEN timetable = ?2 THEN clock_back_at END, \
               clock_back_cursor = CASE WHEN ?8 IS NOT NULL THEN ?8 \
                 WHEN timetable = ?2 THEN clock_back_cursor END",
            params![
                req.project,
                req.timetable,
                req.cursor,
                req.next_fire,
                skipped_now,
                last_skipped,
                now,
                req.clock_back_from
            ],
        )?;
        tx.commit()?;
        Ok(out)
    }
}

/// Inserts a run for an occurrence unless one exists; returns its id if new, `None` when the
/// occurrence already has its run (handled before).
///
/// "Already handled" is decided by reading the row under the write lock of the caller's
/// `BEGIN IMMEDIATE` transaction, never by reading an error: any failure of the insert (a
/// `CHECK`, a `NOT NULL`, a trigger's abort, a full disk) is an error that rolls the whole
/// transaction back, cursor included, so the occurrence fires again on a later EVAL instead of
/// being marked handled with no run for it.
///
/// Errors: any store error, the insert's included.
fn insert_unique(tx: &rusqlite::Connection, new: &NewRun, now: Millis) -> Result<Option<RunId>> {
    let existing: Option<RunId> = tx
        .prepare_cached(
            "SELECT id FROM runs WHERE project = ?1 AND occurrence = ?2 AND trigger = 'schedule'",
        )?
        .query_row(params![new.project, new.occurrence], |r| r.get(0))
        .optional()?;
    if existing.is_some() {
        return Ok(None);
    }
    insert_run(tx, new, 1, None, now).map(Some)
}

/// Records a skipped occurrence as a `cancelled` run carrying the reason: it marks the
/// occurrence handled (unique key) and shows the skip in `fleet runs`.
fn insert_skip(
    tx: &rusqlite::Connection,
    new: &NewRun,
    reason: &str,
    now: Millis,
) -> Result<Option<RunId>> {
    let Some(id) = insert_unique(tx, new, now)? else {
        return Ok(None);
    };
    // Just inserted, so still queued: the same ending as any queued run's cancel.
    cancel_if_queued(tx, id, reason, now)?;
    Ok(Some(id))
}
