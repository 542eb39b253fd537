//! Schedule cursors and firing occurrences, for PostgreSQL.
//!
//! As on SQLite, an occurrence is "handled" only when a run row for it exists, inserted in the
//! transaction that advances the cursor, under the unique key (project, occurrence). Two hosts
//! firing one schedule at once are served one after the other: each step holds an advisory lock
//! on its project (`pg_advisory_xact_lock`) for its transaction, so the second reads the cursor
//! the first wrote and finds it moved.

use postgres::Transaction;

use super::daemon::check_epoch;
use super::paused::held_by;
use super::runs::{cancel_if_queued, insert_run, request_stop};
use super::PgStore;
use crate::error::Result;
use crate::{
    ClockBack, FireRequest, Fired, HoldKind, Millis, NewRun, OverlapPolicy, RunId, ScheduleRow,
    Trigger,
};

impl PgStore {
    /// [`crate::Store::schedules`].
    pub(crate) fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        let mut conn = self.conn()?;
        let rows = conn.query(
            "SELECT project, timetable, cursor, next_fire, skipped_total, last_skipped, \
               clock_back_at, clock_back_cursor FROM schedules ORDER BY project",
            &[],
        )?;
        rows.iter()
            .map(|r| {
                let seen_at: Option<Millis> = r.try_get(6)?;
                let cursor_was: Option<Millis> = r.try_get(7)?;
                Ok(ScheduleRow {
                    project: r.try_get(0)?,
                    timetable: r.try_get(1)?,
                    cursor: r.try_get(2)?,
                    next_fire: r.try_get(3)?,
                    skipped_total: r.try_get(4)?,
                    last_skipped: r.try_get(5)?,
                    clock_back: seen_at
                        .zip(cursor_was)
                        .map(|(seen_at, cursor_was)| ClockBack {
                            seen_at,
                            cursor_was,
                        }),
                })
            })
            .collect()
    }

    /// [`crate::Store::fire_schedule`]: under the project's advisory lock, the cursor check,
    /// the occurrence's run (or its skip) and the new cursor in one transaction.
    pub(crate) fn fire_schedule(
        &self,
        epoch: i64,
        req: &FireRequest,
        now: Millis,
    ) -> Result<Fired> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        check_epoch(&mut tx, epoch)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('fleet schedule ' || $1, 0))",
            &[&req.project],
        )?;
        let stored = tx.query_opt(
            "SELECT timetable, cursor FROM schedules WHERE project = $1",
            &[&req.project],
        )?;
        let current = match stored {
            Some(r) => {
                let tt: String = r.try_get(0)?;
                let cursor: Millis = r.try_get(1)?;
                (tt == req.timetable).then_some(cursor)
            }
            None => None,
        };
        if current != req.expected_cursor {
            return Ok(Fired::default());
        }
        let mut out = Fired {
            written: true,
            ..Fired::default()
        };
        let skipped_note = (req.skipped_count > 0).then(|| {
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
            format!(
                "{} earlier occurrence(s) missed and skipped ({first} .. {last})",
                req.skipped_count
            )
        });
        let new_run = |occurrence| NewRun {
            project: req.project.clone(),
            namespace: req.namespace.clone(),
            priority: 0,
            trigger: Trigger::Schedule,
            occurrence: Some(occurrence),
            not_before: 0,
            ..Default::default()
        };
        if let Some(occurrence) = req.fire {
            // The project's queued and active runs, the active ones first, oldest first.
            let others: Vec<(RunId, String)> = tx
                .query(
                    "SELECT id, status FROM runs WHERE project = $1 \
                       AND status IN ('queued','starting','running') \
                     ORDER BY status = 'queued', id",
                    &[&req.project],
                )?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_>>()?;
            let seats = req.max_parallel.max(1) as usize;
            let active = others.iter().filter(|(_, st)| st != "queued").count();
            // Forbid skips once the project's queued and active runs fill its seats; replace
            // stops the oldest active run once the active ones fill them (as on SQLite).
            let blocking = (others.len() >= seats).then(|| others[0].clone());
            let to_replace = (active >= seats).then(|| others[0].clone());
            let held = held_by(&mut tx, &req.project, &req.namespace)?;
            let new = new_run(occurrence);
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
                    out.skipped_run = insert_skip(&mut tx, &new, &reason, now)?;
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
                    out.skipped_run = insert_skip(&mut tx, &new, &reason, now)?;
                }
                (policy, _) => {
                    out.queued = insert_unique(&mut tx, &new, now)?;
                    // Only an occurrence that got its run here may replace anything.
                    if let (OverlapPolicy::Replace, Some((id, status)), Some(_)) =
                        (policy, &to_replace, out.queued)
                    {
                        if status != "queued" {
                            let why = format!(
                                "replaced by the occurrence at {} (overlap = \"replace\")",
                                crate::rfc3339(occurrence)
                            );
                            request_stop(&mut tx, *id, &why, now)?;
                            out.replaced = Some(*id);
                        }
                    }
                    if let (Some(id), Some(note)) = (out.queued, &skipped_note) {
                        tx.execute("UPDATE runs SET reason = $2 WHERE id = $1", &[&id, note])?;
                    }
                }
            }
        }
        if let Some(late) = req.too_late {
            let mut reason = "skipped: missed by more than starting_deadline".to_string();
            if let Some(note) = &skipped_note {
                reason = format!("{reason}; {note}");
            }
            out.skipped_run = insert_skip(&mut tx, &new_run(late), &reason, now)?;
        }
        let skipped_now = req.skipped_count as i64
            + i64::from(req.too_late.is_some())
            + i64::from(out.skipped_run.is_some() && req.too_late.is_none());
        let last_skipped = req.too_late.or(req.skipped.last().copied());
        tx.execute(
            "INSERT INTO schedules (project, timetable, cursor, next_fire, skipped_total, \
               last_skipped, updated_at, clock_back_at, clock_back_cursor) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN $8::bigint IS NULL THEN NULL ELSE $7::bigint END, $8) \
             ON CONFLICT (project) DO UPDATE SET timetable = $2, cursor = $3, next_fire = $4, \
               skipped_total = CASE WHEN schedules.timetable = $2 \
                 THEN schedules.skipped_total + $5 ELSE $5 END, \
               last_skipped = COALESCE($6, schedules.last_skipped), updated_at = $7, \
               clock_back_at = CASE WHEN $8::bigint IS NOT NULL THEN $7::bigint \
                 WHEN schedules.timetable = $2 THEN schedules.clock_back_at END, \
               clock_back_cursor = CASE WHEN $8::bigint IS NOT NULL THEN $8 \
                 WHEN schedules.timetable = $2 THEN schedules.clock_back_cursor END",
            &[
                &req.project,
                &req.timetable,
                &req.cursor,
                &req.next_fire,
                &skipped_now,
                &last_skipped,
                &now,
                &req.clock_back_from,
            ],
        )?;
        tx.commit()?;
        Ok(out)
    }
}

/// Inserts a run for an occurrence unless one exists; returns its id if new, `None` when the
/// occurrence already has its run. Decided by reading the row (under the project's advisory
/// lock), never by reading an error: a failed insert rolls the whole step back, cursor included.
fn insert_unique(tx: &mut Transaction<'_>, new: &NewRun, now: Millis) -> Result<Option<RunId>> {
    let existing = tx.query_opt(
        "SELECT id FROM runs WHERE project = $1 AND occurrence = $2 AND trigger = 'schedule'",
        &[&new.project, &new.occurrence],
    )?;
    if existing.is_some() {
        return Ok(None);
    }
    insert_run(tx, new, 1, None, now).map(Some)
}

/// Records a skipped occurrence as a `cancelled` run carrying the reason.
fn insert_skip(
    tx: &mut Transaction<'_>,
    new: &NewRun,
    reason: &str,
    now: Millis,
) -> Result<Option<RunId>> {
    let Some(id) = insert_unique(tx, new, now)? else {
        return Ok(None);
    };
    cancel_if_queued(tx, id, reason, now)?;
    Ok(Some(id))
}
