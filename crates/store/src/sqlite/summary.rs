//! The monitoring reads: [`crate::Store::ended_totals`] and [`crate::Store::queue_summary`].
//!
//! Nothing here writes. `ended_totals` reads `run_totals`, which triggers keep (see
//! `schema.sql`), so a scrape reads one row per (project, status) whatever the history's length.

use super::SqliteStore;
use crate::error::Result;
use crate::{EndedTotal, Millis, QueueSummary, RunStatus, StoreError};

impl SqliteStore {
    /// [`crate::Store::ended_totals`].
    pub(crate) fn ended_totals(&self) -> Result<Vec<EndedTotal>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT project, status, ended, last_finished_at FROM run_totals \
             ORDER BY project, status",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<i64>>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (project, status, count, last_finished_at) = row?;
            let status = status
                .parse::<RunStatus>()
                .map_err(|_| StoreError::Corrupt {
                    run: 0,
                    column: "run_totals.status",
                    value: status.clone(),
                })?;
            out.push(EndedTotal {
                project,
                status,
                count: u64::try_from(count).unwrap_or(0),
                last_finished_at,
            });
        }
        Ok(out)
    }

    /// [`crate::Store::queue_summary`].
    pub(crate) fn queue_summary(&self, now: Millis) -> Result<Vec<QueueSummary>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT namespace, count(*), min(enqueued_at), \
             min(CASE WHEN not_before <= ?1 THEN max(enqueued_at, not_before) END) FROM runs \
             WHERE status = 'queued' GROUP BY namespace ORDER BY namespace",
        )?;
        let rows = stmt.query_map([now], |r| {
            Ok(QueueSummary {
                namespace: r.get(0)?,
                queued: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                oldest_enqueued_at: r.get(2)?,
                oldest_ready_at: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
