//! The monitoring reads for PostgreSQL: [`crate::Store::ended_totals`] and
//! [`crate::Store::queue_summary`]. Nothing here writes; `run_totals` is kept by a trigger (see
//! `schema.sql`).

use super::PgStore;
use crate::error::Result;
use crate::{EndedTotal, Millis, QueueSummary, RunStatus, StoreError};

impl PgStore {
    /// [`crate::Store::ended_totals`].
    pub(crate) fn ended_totals(&self) -> Result<Vec<EndedTotal>> {
        let mut conn = self.conn()?;
        let rows = conn.query(
            "SELECT project, status, ended, last_finished_at FROM run_totals \
             ORDER BY project, status",
            &[],
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let status: String = r.try_get(1)?;
            let parsed = status
                .parse::<RunStatus>()
                .map_err(|_| StoreError::Corrupt {
                    run: 0,
                    column: "run_totals.status",
                    value: status.clone(),
                })?;
            out.push(EndedTotal {
                project: r.try_get(0)?,
                status: parsed,
                count: r.try_get::<_, i64>(2)?.max(0) as u64,
                last_finished_at: r.try_get(3)?,
            });
        }
        Ok(out)
    }

    /// [`crate::Store::queue_summary`].
    pub(crate) fn queue_summary(&self, now: Millis) -> Result<Vec<QueueSummary>> {
        let mut conn = self.conn()?;
        let rows = conn.query(
            "SELECT namespace, count(*), min(enqueued_at), \
             min(CASE WHEN not_before <= $1 THEN GREATEST(enqueued_at, not_before) END) FROM runs \
             WHERE status = 'queued' GROUP BY namespace ORDER BY namespace",
            &[&now],
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push(QueueSummary {
                namespace: r.try_get(0)?,
                queued: r.try_get::<_, i64>(1)?.max(0) as u64,
                oldest_enqueued_at: r.try_get(2)?,
                oldest_ready_at: r.try_get(3)?,
            });
        }
        Ok(out)
    }
}
