//! Pruning: selecting the ended runs a policy lets go, forgetting them (run rows and their
//! events), and handing freed pages back to the file system (incremental vacuum, WAL
//! checkpoint).
//!
//! Selection only reads (no write lock). Forgetting is one short `BEGIN IMMEDIATE` transaction
//! per call, and deletes only rows still ended: a row that changed meanwhile stays.

use rusqlite::{params, TransactionBehavior};

use super::SqliteStore;
use crate::error::Result;
use crate::prune::{PruneCandidate, PrunePolicy};
use crate::RunId;

/// The statuses a run can be let go in.
const ENDED: &str = "('succeeded','failed','timed_out','cancelled','lost')";

impl SqliteStore {
    /// [`crate::Store::prune_candidates`].
    pub(crate) fn prune_candidates(
        &self,
        policy: &PrunePolicy,
        limit: usize,
    ) -> Result<Vec<PruneCandidate>> {
        let conn = self.conn()?;
        let projects: Vec<String> = conn
            .prepare_cached("SELECT DISTINCT project FROM runs ORDER BY project")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        // The rank counts the project's ended runs, newest (highest id) first: rank 1, the
        // newest, is never let go.
        let sql = format!(
            "SELECT id, finished_at FROM (
                 SELECT id, finished_at, ROW_NUMBER() OVER (ORDER BY id DESC) AS rank
                 FROM runs WHERE project = ?1 AND status IN {ENDED})
             WHERE rank > 1 AND finished_at < ?2
               AND ((?3 IS NOT NULL AND rank > ?3) OR (?4 IS NOT NULL AND finished_at < ?4))
             ORDER BY id LIMIT ?5"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut out = Vec::new();
        for project in projects {
            if out.len() >= limit {
                break;
            }
            let keep = policy.keep_for(&project);
            if keep.keeps_all() {
                continue;
            }
            let rows = stmt.query_map(
                params![
                    project,
                    policy.ended_before,
                    keep.newest,
                    keep.finished_after,
                    (limit - out.len()) as i64
                ],
                |r| Ok((r.get::<_, RunId>(0)?, r.get::<_, Option<i64>>(1)?)),
            )?;
            for row in rows {
                let (id, finished_at) = row?;
                out.push(PruneCandidate {
                    id,
                    project: project.clone(),
                    finished_at: finished_at.unwrap_or(0),
                });
            }
        }
        Ok(out)
    }

    /// [`crate::Store::forget_runs`].
    pub(crate) fn forget_runs(&self, ids: &[RunId]) -> Result<usize> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut forgotten = 0;
        {
            let mut events = tx.prepare_cached(&format!(
                "DELETE FROM events WHERE run_id = ?1
                   AND EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND status IN {ENDED})"
            ))?;
            let mut runs = tx.prepare_cached(&format!(
                "DELETE FROM runs WHERE id = ?1 AND status IN {ENDED}"
            ))?;
            for id in ids {
                events.execute([id])?;
                forgotten += runs.execute([id])?;
            }
        }
        tx.commit()?;
        Ok(forgotten)
    }

    /// [`crate::Store::reclaim_space`].
    pub(crate) fn reclaim_space(&self, pages: u32) -> Result<()> {
        let conn = self.conn()?;
        // Each step of incremental_vacuum is a row; the statement must be stepped to the end.
        let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({pages})"))?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        drop(rows);
        drop(stmt);
        // TRUNCATE: the WAL file goes back to zero bytes when no reader needs it; a busy
        // checkpoint is not an error (it reports so in its row and is tried again next time).
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// [`crate::Store::enable_incremental_vacuum`].
    pub(crate) fn enable_incremental_vacuum(&self) -> Result<bool> {
        let conn = self.conn()?;
        let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
        if mode == 2 {
            return Ok(false);
        }
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")?;
        Ok(true)
    }
}
