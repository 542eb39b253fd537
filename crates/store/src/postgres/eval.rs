//! The EVAL's read queries, for PostgreSQL: the DB running set, the queue heads, the next
//! delayed run, the projects with queued runs, and the occupancy a claim records.
//!
//! Each runs once per EVAL, so each must cost in proportion to the number of projects, never to
//! the length of the queue: the heads are read from the `queue_heads` table (one row per project
//! with queued runs, kept by a trigger; see `schema`), as on SQLite. Nothing here writes.

use postgres::Transaction;

use super::runs::{collect_rows, RUN_COLUMNS};
use super::PgStore;
use crate::error::Result;
use crate::{Millis, QueueHead, RunRows};

impl PgStore {
    /// [`crate::Store::active_rows`].
    pub(crate) fn active_rows(&self) -> Result<RunRows> {
        let mut conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('starting','running') ORDER BY id"
        );
        collect_rows(conn.query(&sql, &[])?)
    }

    /// [`crate::Store::queue_heads`]: the rows of `queue_heads`, one per project with queued
    /// runs; a second seek in `runs_queue` only for a project whose first run is delayed.
    pub(crate) fn queue_heads(&self, now: Millis) -> Result<Vec<QueueHead>> {
        let mut conn = self.conn()?;
        let rows = conn.query(
            "SELECT run_id, project, namespace, priority FROM queue_heads WHERE not_before <= $1 \
             UNION ALL \
             SELECT r.id, r.project, r.namespace, r.priority FROM queue_heads h \
               JOIN runs r ON r.id = ( \
                 SELECT id FROM runs WHERE status = 'queued' \
                   AND project = h.project AND not_before <= $1 \
                   ORDER BY priority DESC, id LIMIT 1) \
             WHERE h.not_before > $1 \
             ORDER BY 2",
            &[&now],
        )?;
        rows.iter()
            .map(|r| {
                Ok(QueueHead {
                    run_id: r.try_get(0)?,
                    project: r.try_get(1)?,
                    namespace: r.try_get(2)?,
                    priority: r.try_get(3)?,
                })
            })
            .collect()
    }

    /// [`crate::Store::queue_of`]: one walk of `runs_queue` within the project.
    pub(crate) fn queue_of(
        &self,
        project: &str,
        now: Millis,
        limit: u32,
    ) -> Result<Vec<QueueHead>> {
        let mut conn = self.conn()?;
        let rows = conn.query(
            "SELECT id, project, namespace, priority FROM runs              WHERE status = 'queued' AND project = $1 AND not_before <= $2              ORDER BY priority DESC, id LIMIT $3",
            &[&project, &now, &i64::from(limit)],
        )?;
        rows.iter()
            .map(|r| {
                Ok(QueueHead {
                    run_id: r.try_get(0)?,
                    project: r.try_get(1)?,
                    namespace: r.try_get(2)?,
                    priority: r.try_get(3)?,
                })
            })
            .collect()
    }

    /// [`crate::Store::next_not_before`]: one seek in `runs_waiting`.
    pub(crate) fn next_not_before(&self, now: Millis) -> Result<Option<Millis>> {
        let mut conn = self.conn()?;
        Ok(conn
            .query_one(
                "SELECT MIN(not_before) FROM runs WHERE status = 'queued' AND not_before > $1",
                &[&now],
            )?
            .try_get(0)?)
    }

    /// [`crate::Store::queued_projects`]: the projects of `queue_heads`.
    pub(crate) fn queued_projects(&self) -> Result<Vec<String>> {
        let mut conn = self.conn()?;
        let rows = conn.query("SELECT project FROM queue_heads ORDER BY project", &[])?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }
}

/// Active runs right now, in the whole install and in `namespace`: the occupancy recorded with
/// a claim, counted inside the claim's transaction (the claim just made included; claims other
/// transactions have not committed yet are not seen, READ COMMITTED).
pub(super) fn occupancy(tx: &mut Transaction<'_>, namespace: &str) -> Result<(u32, u32)> {
    let row = tx.query_one(
        "SELECT count(*), count(*) FILTER (WHERE namespace = $1) FROM runs \
         WHERE status IN ('starting','running')",
        &[&namespace],
    )?;
    Ok((
        row.try_get::<_, i64>(0)? as u32,
        row.try_get::<_, i64>(1)? as u32,
    ))
}
