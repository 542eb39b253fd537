//! The EVAL's read queries: the DB running set, the queue heads, the next delayed run, the
//! projects with queued runs, and the occupancy a claim records.
//!
//! Each runs once per EVAL, so each must cost in proportion to the number of projects, never to
//! the length of the queue: the queue walks are skip-scans forced onto their index with
//! `INDEXED BY`. Nothing here writes.

use rusqlite::{params, Connection};

use super::runs::{collect_runs, RUN_COLUMNS};
use super::SqliteStore;
use crate::error::Result;
use crate::{Millis, QueueHead, Run};

/// A common table expression `p(name)`: each project that has queued runs, found by jumping
/// through the `runs_queue` index from one project to the next (a skip-scan), so its cost grows
/// with the number of projects, not with the length of the queue. The last row is NULL.
///
/// `INDEXED BY` is needed: without statistics (fleet never runs ANALYZE) SQLite prefers the
/// equality on `runs_by_status (status, id)` and sorts every queued run by project at each step,
/// which makes one EVAL cost projects × queue length (13 s with 100,000 queued runs over 1,000
/// projects; `cargo bench -p supervisor --bench eval`). With it, a query that could no longer use
/// the index fails at prepare instead of silently scanning.
const QUEUED_PROJECTS: &str = "WITH RECURSIVE p(name) AS ( \
       SELECT (SELECT project FROM runs INDEXED BY runs_queue WHERE status = 'queued' \
               ORDER BY project LIMIT 1) \
       UNION ALL \
       SELECT (SELECT project FROM runs INDEXED BY runs_queue WHERE status = 'queued' \
               AND project > p.name ORDER BY project LIMIT 1) FROM p WHERE p.name IS NOT NULL)";

impl SqliteStore {
    /// [`crate::Store::active_runs`].
    pub(crate) fn active_runs(&self) -> Result<Vec<Run>> {
        let conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('starting','running') ORDER BY id"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        collect_runs(&mut stmt, [])
    }

    /// [`crate::Store::queue_heads`]: one recursive query that walks `runs_queue` from
    /// one project to the next.
    pub(crate) fn queue_heads(&self, now: Millis) -> Result<Vec<QueueHead>> {
        let conn = self.conn()?;
        // h: the first entry of each project in runs_queue order (its best queued run, delayed
        // or not), found by one seek past the previous project. Only a project whose best run
        // is delayed (a retry's backoff) needs a second seek.
        let mut stmt = conn.prepare_cached(
            "WITH RECURSIVE h(project, id, not_before) AS ( \
                 SELECT * FROM (SELECT project, id, not_before FROM runs INDEXED BY runs_queue \
                   WHERE status = 'queued' ORDER BY project, priority DESC, id LIMIT 1) \
                 UNION ALL \
                 SELECT r.project, r.id, r.not_before FROM h JOIN runs r ON r.id = ( \
                   SELECT id FROM runs INDEXED BY runs_queue WHERE status = 'queued' \
                     AND project > h.project ORDER BY project, priority DESC, id LIMIT 1)) \
             SELECT r.id, r.project, r.namespace, r.priority FROM h JOIN runs r ON r.id = \
               CASE WHEN h.not_before <= ?1 THEN h.id ELSE ( \
                 SELECT id FROM runs INDEXED BY runs_queue WHERE status = 'queued' \
                   AND project = h.project AND not_before <= ?1 \
                   ORDER BY priority DESC, id LIMIT 1) END",
        )?;
        let rows = stmt.query_map([now], |r| {
            Ok(QueueHead {
                run_id: r.get(0)?,
                project: r.get(1)?,
                namespace: r.get(2)?,
                priority: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// [`crate::Store::queue_of`]: one walk of `runs_queue` within the project.
    pub(crate) fn queue_of(
        &self,
        project: &str,
        now: Millis,
        limit: u32,
    ) -> Result<Vec<QueueHead>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT id, project, namespace, priority FROM runs INDEXED BY runs_queue \
             WHERE status = 'queued' AND project = ?1 AND not_before <= ?2 \
             ORDER BY priority DESC, id LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![project, now, limit], |r| {
            Ok(QueueHead {
                run_id: r.get(0)?,
                project: r.get(1)?,
                namespace: r.get(2)?,
                priority: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// [`crate::Store::next_not_before`].
    pub(crate) fn next_not_before(&self, now: Millis) -> Result<Option<Millis>> {
        let conn = self.conn()?;
        let v: Option<Millis> = conn
            .prepare_cached(
                // One seek in runs_waiting; forced, for the same reason as in QUEUED_PROJECTS
                // (runs_by_status would read every queued run).
                "SELECT MIN(not_before) FROM runs INDEXED BY runs_waiting \
                 WHERE status = 'queued' AND not_before > ?1",
            )?
            .query_row([now], |r| r.get(0))?;
        Ok(v)
    }

    /// [`crate::Store::queued_projects`], through [`QUEUED_PROJECTS`].
    pub(crate) fn queued_projects(&self) -> Result<Vec<String>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "{QUEUED_PROJECTS} SELECT name FROM p WHERE name IS NOT NULL"
        ))?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// Active runs right now, in the whole install and in `namespace`: the occupancy recorded with
/// a claim. Counted on the caller's connection, inside the claim's transaction, so the numbers
/// include the claim just made and no write of another connection can slip in between.
pub(super) fn occupancy(conn: &Connection, namespace: &str) -> Result<(u32, u32)> {
    let global: u32 = conn
        .prepare_cached("SELECT COUNT(*) FROM runs WHERE status IN ('starting','running')")?
        .query_row([], |r| r.get(0))?;
    let in_namespace: u32 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM runs WHERE status IN ('starting','running') AND namespace = ?1",
        )?
        .query_row([namespace], |r| r.get(0))?;
    Ok((global, in_namespace))
}
