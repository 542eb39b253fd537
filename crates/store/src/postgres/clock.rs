//! Time on PostgreSQL: the server's clock as a host measures it (see [`crate::db_clock`]), and
//! delays written by a clock that has since stepped back (see [`crate::decide::clock`] for the
//! why): a queued run whose `enqueued_at` is later than now.

use super::daemon::check_epoch;
use super::PgStore;
use crate::db_clock::{reading, ClockReading};
use crate::decide::clock::rebase;
use crate::error::Result;
use crate::{local_now_ms, Delayed, Millis};
use std::time::Instant;

impl PgStore {
    /// [`crate::Store::database_clock`]: the server's `clock_timestamp()`, timed by this
    /// process's monotonic clock around the query (the connection taken first, so that the
    /// pool's wait is not in the round trip).
    pub(crate) fn database_clock(&self) -> Result<ClockReading> {
        let mut conn = self.conn()?;
        let sent = Instant::now();
        let local = local_now_ms();
        let database_ms: Millis = conn
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )?
            .try_get(0)?;
        Ok(reading(sent, local, database_ms, Instant::now()))
    }

    /// [`crate::Store::rebase_delays`]: a read of the delayed queued runs, and a write only
    /// when it found any.
    pub(crate) fn rebase_delays(
        &self,
        epoch: i64,
        now: Millis,
        tolerance: Millis,
    ) -> Result<Vec<Delayed>> {
        let ahead = now.saturating_add(tolerance);
        let mut conn = self.conn()?;
        let found = conn.query(
            "SELECT id, project, not_before, enqueued_at FROM runs \
             WHERE status = 'queued' AND not_before > $1 AND enqueued_at > $2 ORDER BY id",
            &[&now, &ahead],
        )?;
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = conn.transaction()?;
        check_epoch(&mut tx, epoch)?;
        let mut out = Vec::new();
        for row in found {
            let id: i64 = row.try_get(0)?;
            let project: String = row.try_get(1)?;
            let not_before: Millis = row.try_get(2)?;
            let enqueued_at: Millis = row.try_get(3)?;
            let (new, note) = rebase(not_before, enqueued_at, now);
            // Guarded by the same condition: a run claimed or cancelled meanwhile is left alone.
            let changed = tx.execute(
                "UPDATE runs SET not_before = $2, enqueued_at = $3, \
                   reason = CASE WHEN reason IS NULL THEN $4 ELSE reason || '; ' || $4 END \
                 WHERE id = $1 AND status = 'queued' AND enqueued_at > $5",
                &[&id, &new, &now, &note, &ahead],
            )?;
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
