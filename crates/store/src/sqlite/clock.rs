//! Delays written by a clock that has since stepped back, for SQLite: finds the queued runs
//! whose `enqueued_at` is later than now and writes what [`crate::decide::clock`] says (see
//! there for the why).

use rusqlite::{params, TransactionBehavior};

use super::daemon::check_epoch;
use super::SqliteStore;
use crate::decide::clock::rebase;
use crate::error::Result;
use crate::{Delayed, Millis};

impl SqliteStore {
    /// [`crate::Store::rebase_delays`]: a read (one seek in `runs_waiting`, the delayed queued
    /// runs only), and a write only when it found any.
    pub(crate) fn rebase_delays(
        &self,
        epoch: i64,
        now: Millis,
        tolerance: Millis,
    ) -> Result<Vec<Delayed>> {
        let ahead = now.saturating_add(tolerance);
        // Forced onto runs_waiting: without statistics SQLite could prefer runs_by_status.
        const FIND: &str = "SELECT id, project, not_before, enqueued_at FROM runs \
             INDEXED BY runs_waiting WHERE status = 'queued' AND not_before > ?1 \
             AND enqueued_at > ?2 ORDER BY id";
        let found = {
            let conn = self.conn()?;
            let mut stmt = conn.prepare_cached(FIND)?;
            let rows = stmt.query_map(params![now, ahead], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
            rows.collect::<rusqlite::Result<Vec<(i64, String, Millis, Millis)>>>()?
        };
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_epoch(&tx, epoch)?;
        let mut out = Vec::new();
        for (id, project, not_before, enqueued_at) in found {
            let (new, note) = rebase(not_before, enqueued_at, now);
            // Guarded by the same condition: a run claimed or cancelled meanwhile is left alone.
            let changed = tx
                .prepare_cached(
                    "UPDATE runs SET not_before = ?2, enqueued_at = ?3, \
                       reason = CASE WHEN reason IS NULL THEN ?4 ELSE reason || '; ' || ?4 END \
                     WHERE id = ?1 AND status = 'queued' AND enqueued_at > ?5",
                )?
                .execute(params![id, new, now, note, ahead])?;
            if changed == 1 {
                out.push(Delayed {
                    run_id: id,
                    project,
                    not_before_was: not_before,
                    not_before: new,
                });
            }
        }
        tx.commit()?;
        Ok(out)
    }
}
