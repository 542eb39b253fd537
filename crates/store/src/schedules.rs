//! Schedule cursors and firing occurrences: "handled" means a run row for the occurrence exists,
//! inserted in the same transaction that advances the persisted cursor (the brief's failure 3).

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use crate::{
    check_epoch, get_run, insert_event, insert_run, EventRow, Millis, NewRun, Result, RunId,
    RunStatus, Store, Trigger,
};

/// A scheduled project's persisted cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRow {
    /// The project.
    pub project: String,
    /// The timetable the cursor belongs to (cron expression and timezone, as one string). When
    /// the config's timetable differs, the schedule starts afresh.
    pub timetable: String,
    /// The last occurrence handled, fired or skipped (ms UTC).
    pub cursor: Millis,
    /// The next occurrence after the cursor, if any (ms UTC).
    pub next_fire: Option<Millis>,
    /// How many occurrences were skipped (missed or overlapping) over the schedule's life.
    pub skipped_total: i64,
    /// The latest skipped occurrence.
    pub last_skipped: Option<Millis>,
}

/// What to do with an occurrence that is due, given the project's active run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverlapPolicy {
    /// Skip the occurrence while a run of the project is active or waiting (recorded as a
    /// `cancelled` run with the reason, so it shows in `fleet runs`).
    Forbid,
    /// Queue it; it starts when the active run ends.
    Queue,
    /// Ask the active run to stop (cancel flag) and queue the new one.
    Replace,
}

/// One schedule step, written atomically by [`Store::fire_schedule`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FireRequest {
    /// The project.
    pub project: String,
    /// Its namespace in the config in force.
    pub namespace: String,
    /// The timetable string (see [`ScheduleRow::timetable`]).
    pub timetable: String,
    /// The cursor the caller computed from (None: a new schedule). If the stored cursor differs,
    /// nothing is written: someone else advanced it.
    pub expected_cursor: Option<Millis>,
    /// The new cursor.
    pub cursor: Millis,
    /// The next occurrence after the new cursor.
    pub next_fire: Option<Millis>,
    /// The occurrence to fire now, if any.
    pub fire: Option<Millis>,
    /// Occurrences passed over without a run (missed), newest last.
    pub skipped: Vec<Millis>,
    /// The number of skipped occurrences, when more were skipped than `skipped` lists.
    pub skipped_count: u64,
    /// A missed occurrence that was too late to start (beyond starting_deadline): recorded as a
    /// `cancelled` run with the reason, so the operator sees it in `fleet runs`.
    pub too_late: Option<Millis>,
    /// The overlap policy for `fire`.
    pub overlap: OverlapPolicy,
}

/// What [`Store::fire_schedule`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fired {
    /// The queued run made for the occurrence.
    pub queued: Option<RunId>,
    /// A `cancelled` run recording a skipped occurrence (overlap forbid, or too late).
    pub skipped_run: Option<RunId>,
    /// The active run asked to stop (overlap replace).
    pub replaced: Option<RunId>,
    /// False when the stored cursor had moved: nothing was written.
    pub written: bool,
}

impl Store {
    /// Every schedule cursor.
    pub fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT project, timetable, cursor, next_fire, skipped_total, last_skipped FROM schedules ORDER BY project",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(ScheduleRow {
                project: r.get(0)?,
                timetable: r.get(1)?,
                cursor: r.get(2)?,
                next_fire: r.get(3)?,
                skipped_total: r.get(4)?,
                last_skipped: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Advances one schedule: inserts the occurrence's run (or the record of its skip) and moves
    /// the cursor, in one transaction. The run insert is under the unique key (project,
    /// occurrence), so an occurrence already handled is never handled twice, whatever the caller
    /// computed.
    ///
    /// Errors: busy database (nothing written; the next EVAL computes the same step again),
    /// fencing.
    pub fn fire_schedule(&self, epoch: i64, req: &FireRequest, now: Millis) -> Result<Fired> {
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
            let first = req
                .skipped
                .first()
                .copied()
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
            let blocking: Option<(RunId, String)> = tx
                .prepare_cached(
                    "SELECT id, status FROM runs WHERE project = ?1 AND status IN ('queued','starting','running') \
                     ORDER BY status = 'queued', id LIMIT 1",
                )?
                .query_row([&req.project], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let new = NewRun {
                project: req.project.clone(),
                namespace: req.namespace.clone(),
                priority: 0,
                trigger: Trigger::Schedule,
                occurrence: Some(occurrence),
                not_before: 0,
            };
            match (req.overlap, blocking) {
                (OverlapPolicy::Forbid, Some((id, status))) => {
                    let mut reason = format!(
                        "skipped: overlap = \"forbid\" and run {id} of this project is {status}"
                    );
                    if let Some(note) = &skipped_note {
                        reason = format!("{reason}; {note}");
                    }
                    out.skipped_run = insert_skip(&tx, &new, &reason, now)?;
                }
                (policy, blocking) => {
                    if let (OverlapPolicy::Replace, Some((id, status))) = (policy, &blocking) {
                        if status != "queued" {
                            tx.execute(
                                "UPDATE runs SET cancel_requested = 1, reason = ?2 WHERE id = ?1",
                                params![
                                    id,
                                    format!(
                                        "replaced by the occurrence at {} (overlap = \"replace\")",
                                        crate::rfc3339(occurrence)
                                    )
                                ],
                            )?;
                            out.replaced = Some(*id);
                        }
                    }
                    out.queued = insert_unique(&tx, &new, now)?;
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
        tx.execute(
            "INSERT INTO schedules (project, timetable, cursor, next_fire, skipped_total, last_skipped, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
             ON CONFLICT (project) DO UPDATE SET timetable = ?2, cursor = ?3, next_fire = ?4, \
               skipped_total = CASE WHEN timetable = ?2 THEN skipped_total + ?5 ELSE ?5 END, \
               last_skipped = COALESCE(?6, last_skipped), updated_at = ?7",
            params![
                req.project,
                req.timetable,
                req.cursor,
                req.next_fire,
                skipped_now,
                last_skipped,
                now
            ],
        )?;
        tx.commit()?;
        Ok(out)
    }
}

/// Inserts a run for an occurrence unless one exists (the unique key); returns its id if new.
fn insert_unique(tx: &rusqlite::Connection, new: &NewRun, now: Millis) -> Result<Option<RunId>> {
    match insert_run(tx, new, 1, None, now) {
        Ok(id) => Ok(Some(id)),
        Err(crate::StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)))
            if e.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
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
    tx.execute(
        "UPDATE runs SET status = 'cancelled', finished_at = ?2, reason = ?3 WHERE id = ?1",
        params![id, now, reason],
    )?;
    if let Some(run) = get_run(tx, id)? {
        insert_event(
            tx,
            &EventRow {
                run: &run,
                from: Some(RunStatus::Queued),
                epoch: None,
                at: now,
                occupancy: None,
                detail: Some(reason),
            },
        )?;
    }
    Ok(Some(id))
}
