//! Delays written by a clock that has since stepped back, for PostgreSQL (see
//! [`crate::decide::clock`] for the why): a queued run whose `enqueued_at` is later than now.

use super::daemon::check_epoch;
use super::PgStore;
use crate::decide::clock::rebase;
use crate::error::Result;
use crate::{Delayed, Millis};

impl PgStore {
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
