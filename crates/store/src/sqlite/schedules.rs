//! Schedule cursors and firing occurrences, for SQLite.
//!
//! An occurrence is "handled" only when a run row for it exists, inserted in the same
//! transaction that advances the persisted cursor, under the unique key (project, occurrence):
//! a runner that marked an occurrence handled without making its run would have the schedule
//! claim to fire while nothing starts. Nothing here may move a cursor without that insert.
//!
//! What a step writes (queue, skip, replace, the notes and totals) is decided by
//! [`crate::decide::schedule`]; this file checks the cursor, supplies the SQL steps and writes
//! the cursor row.

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::daemon::check_epoch;
use super::paused::held_by;
use super::runs::{insert_run, RunTx};
use super::SqliteStore;
use crate::decide::schedule::{cursor_is_expected, fire, FireSteps, Totals};
use crate::error::Result;
use crate::{ClockBack, FireRequest, Fired, HoldKind, Millis, NewRun, RunId, ScheduleRow};

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
        if !cursor_is_expected(req, stored.as_ref().map(|(tt, c)| (tt.as_str(), *c))) {
            return Ok(Fired::default());
        }
        let (out, totals) = fire(&mut RunTx(&tx), req, now)?;
        let Totals {
            skipped_now,
            last_skipped,
        } = totals;
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

/// A fire step's reads and writes on SQLite, on the caller's `BEGIN IMMEDIATE` transaction.
impl FireSteps for RunTx<'_> {
    fn queued_and_active(&mut self, project: &str) -> Result<Vec<(RunId, String)>> {
        Ok(self
            .0
            .prepare_cached(
                "SELECT id, status FROM runs WHERE project = ?1 AND status IN ('queued','starting','running') \
                 ORDER BY status = 'queued', id",
            )?
            .query_map([project], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?)
    }

    fn held_by(&mut self, project: &str, namespace: &str) -> Result<Option<HoldKind>> {
        held_by(self.0, project, namespace)
    }

    /// "Already handled" is decided by reading the row under the write lock of the caller's
    /// `BEGIN IMMEDIATE` transaction.
    fn insert_unique(&mut self, new: &NewRun, now: Millis) -> Result<Option<RunId>> {
        let existing: Option<RunId> = self
            .0
            .prepare_cached(
                "SELECT id FROM runs WHERE project = ?1 AND occurrence = ?2 AND trigger = 'schedule'",
            )?
            .query_row(params![new.project, new.occurrence], |r| r.get(0))
            .optional()?;
        if existing.is_some() {
            return Ok(None);
        }
        insert_run(self.0, new, 1, None, now).map(Some)
    }

    fn set_reason(&mut self, id: RunId, note: &str) -> Result<()> {
        self.0.execute(
            "UPDATE runs SET reason = ?2 WHERE id = ?1",
            params![id, note],
        )?;
        Ok(())
    }
}
