//! The EVAL's read queries: the DB running set, the queue heads, the next delayed run, the
//! projects with queued runs, and the occupancy a claim records.
//!
//! Each runs once per EVAL, so each must cost in proportion to the number of projects, never to
//! the length of the queue: the heads are read from the `queue_heads` table (one row per project
//! with queued runs, kept by triggers; see `schema`), and the seeks that remain are forced onto
//! their index with `INDEXED BY`. Nothing here writes.

use rusqlite::{params, Connection};

use super::runs::{collect_rows, lossy_text, RUN_COLUMNS};
use super::SqliteStore;
use crate::error::Result;
use crate::{Millis, QueueHead, RunRows};

impl SqliteStore {
    /// [`crate::Store::active_rows`].
    pub(crate) fn active_rows(&self) -> Result<RunRows> {
        let conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('starting','running') ORDER BY id"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        collect_rows(&mut stmt, [])
    }

    /// [`crate::Store::queue_heads`]: the rows of `queue_heads`, one per project with queued
    /// runs; a second seek in `runs_queue` only for a project whose first run is delayed.
    pub(crate) fn queue_heads(&self, now: Millis) -> Result<Vec<QueueHead>> {
        let conn = self.conn()?;
        // A head whose run is ready is the answer as it stands, without touching `runs`: the
        // table is a few dense pages, where each project's first entry in `runs_queue` (and its
        // row in `runs`) sits on a page of its own once the queue is long. `INDEXED BY`: without
        // statistics SQLite could prefer `runs_by_status` and read every queued run.
        let mut stmt = conn.prepare_cached(
            "SELECT run_id, project, namespace, priority FROM queue_heads WHERE not_before <= ?1 \
             UNION ALL \
             SELECT r.id, r.project, r.namespace, r.priority FROM queue_heads h \
               JOIN runs r ON r.id = ( \
                 SELECT id FROM runs INDEXED BY runs_queue WHERE status = 'queued' \
                   AND project = h.project AND not_before <= ?1 \
                   ORDER BY priority DESC, id LIMIT 1) \
             WHERE h.not_before > ?1 \
             ORDER BY 2",
        )?;
        let rows = stmt.query_map([now], queue_head)?;
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
        let rows = stmt.query_map(params![project, now, limit], queue_head)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// [`crate::Store::next_not_before`].
    pub(crate) fn next_not_before(&self, now: Millis) -> Result<Option<Millis>> {
        let conn = self.conn()?;
        let v: Option<Millis> = conn
            .prepare_cached(
                // One seek in runs_waiting; forced: without statistics SQLite could prefer
                // runs_by_status and read every queued run.
                "SELECT MIN(not_before) FROM runs INDEXED BY runs_waiting \
                 WHERE status = 'queued' AND not_before > ?1",
            )?
            .query_row([now], |r| r.get(0))?;
        Ok(v)
    }

    /// [`crate::Store::queued_projects`]: the projects of `queue_heads`.
    pub(crate) fn queued_projects(&self) -> Result<Vec<String>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached("SELECT project FROM queue_heads ORDER BY project")?;
        let rows = stmt.query_map([], |r| lossy_text(r, 0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// A row selected as `id, project, namespace, priority` as a [`QueueHead`]. The names are read
/// as [`lossy_text`]: a name another program wrote that is not UTF-8 must not stop the EVAL's
/// every claim. Such a name matches no project of the config, so its run is never claimed.
fn queue_head(r: &rusqlite::Row<'_>) -> rusqlite::Result<QueueHead> {
    Ok(QueueHead {
        run_id: r.get(0)?,
        project: lossy_text(r, 1)?,
        namespace: lossy_text(r, 2)?,
        priority: r.get(3)?,
    })
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
