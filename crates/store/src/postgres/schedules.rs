//! Schedule cursors and firing occurrences, for PostgreSQL.
//!
//! As on SQLite, an occurrence is "handled" only when a run row for it exists, inserted in the
//! transaction that advances the cursor, under the unique key (project, occurrence). Two hosts
//! firing one schedule at once are served one after the other: each step holds an advisory lock
//! on its project (`pg_advisory_xact_lock`) for its transaction, so the second reads the cursor
//! the first wrote and finds it moved.
//!
//! What a step writes (queue, skip, replace, the notes and totals) is decided by
//! [`crate::decide::schedule`], as on SQLite; this file supplies the SQL steps.

use super::daemon::check_epoch;
use super::paused::held_by;
use super::runs::{insert_run, RunTx};
use super::PgStore;
use crate::decide::schedule::{cursor_is_expected, fire, FireSteps, Totals};
use crate::error::Result;
use crate::{ClockBack, FireRequest, Fired, HoldKind, Millis, NewRun, RunId, ScheduleRow};

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
        let stored: Option<(String, Millis)> = match stored {
            Some(r) => Some((r.try_get(0)?, r.try_get(1)?)),
            None => None,
        };
        if !cursor_is_expected(req, stored.as_ref().map(|(tt, c)| (tt.as_str(), *c))) {
            return Ok(Fired::default());
        }
        let (out, totals) = fire(&mut RunTx(&mut tx), req, now)?;
        let Totals {
            skipped_now,
            last_skipped,
        } = totals;
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

/// A fire step's reads and writes on PostgreSQL, on the caller's transaction (which holds the
/// project's advisory lock).
impl FireSteps for RunTx<'_, '_> {
    fn queued_and_active(&mut self, project: &str) -> Result<Vec<(RunId, String)>> {
        self.0
            .query(
                "SELECT id, status FROM runs WHERE project = $1 \
                   AND status IN ('queued','starting','running') \
                 ORDER BY status = 'queued', id",
                &[&project],
            )?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }

    fn held_by(&mut self, project: &str, namespace: &str) -> Result<Option<HoldKind>> {
        held_by(self.0, project, namespace)
    }

    /// "Already handled" is decided by reading the row under the project's advisory lock.
    fn insert_unique(&mut self, new: &NewRun, now: Millis) -> Result<Option<RunId>> {
        let existing = self.0.query_opt(
            "SELECT id FROM runs WHERE project = $1 AND occurrence = $2 AND trigger = 'schedule'",
            &[&new.project, &new.occurrence],
        )?;
        if existing.is_some() {
            return Ok(None);
        }
        insert_run(self.0, new, 1, None, now).map(Some)
    }

    fn set_reason(&mut self, id: RunId, note: &str) -> Result<()> {
        self.0
            .execute("UPDATE runs SET reason = $2 WHERE id = $1", &[&id, &note])?;
        Ok(())
    }
}
