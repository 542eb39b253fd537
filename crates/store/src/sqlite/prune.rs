//! Pruning: selecting the ended runs a policy lets go, forgetting them (run rows and their
//! events), and handing freed pages back to the file system (incremental vacuum, WAL
//! checkpoint).
//!
//! Selection only reads (no write lock). Forgetting is one short `BEGIN IMMEDIATE` transaction
//! per call, and deletes only rows still ended: a row that changed meanwhile stays.

use rusqlite::{params, CachedStatement, OptionalExtension, TransactionBehavior};

use super::SqliteStore;
use crate::decide::prune::{candidates, LetGo, PruneReads};
use crate::error::Result;
use crate::prune::{PruneCandidate, PrunePolicy};
use crate::{Millis, RunId};

/// The statuses a run can be let go in.
const ENDED: &str = "('succeeded','failed','timed_out','cancelled','lost')";

/// A run is held while a queued or active run refers to it (as the failed run of its hook, the
/// attempt it retries, or the run it repeats): that run still reads its log and `fleet wait`
/// follows the chain through it. Walks the `runs_by_status` index over the unended runs only.
const NOT_REFERRED: &str = "NOT EXISTS (SELECT 1 FROM runs AS r
      WHERE r.status IN ('queued','starting','running')
        AND (r.hook_of = runs.id OR r.retry_of = runs.id OR r.rerun_of = runs.id))";

impl SqliteStore {
    /// [`crate::Store::prune_candidates`]: the rule of [`crate::decide::prune`] over the
    /// index reads of [`Reads`].
    pub(crate) fn prune_candidates(
        &self,
        policy: &PrunePolicy,
        limit: usize,
    ) -> Result<Vec<PruneCandidate>> {
        let conn = self.conn()?;
        let mut reads = Reads {
            next_project: conn.prepare_cached(
                "SELECT project FROM runs WHERE project > ?1 ORDER BY project LIMIT 1",
            )?,
            // ?3: 1 for runs that started, 0 for runs that never did (each counted on its own).
            nth_newest: conn.prepare_cached(&format!(
                "SELECT id FROM runs WHERE project = ?1 AND status IN {ENDED}
                   AND (started_at IS NOT NULL) = ?3
                 ORDER BY id DESC LIMIT 1 OFFSET ?2"
            ))?,
            let_go: conn.prepare_cached(&format!(
                "SELECT id, finished_at FROM runs
                 WHERE project = ?1 AND id < ?2 AND status IN {ENDED} AND finished_at < ?3
                   AND (started_at IS NOT NULL) = ?7
                   AND (?8 IS NULL OR host = ?8)
                   AND ((?4 IS NOT NULL AND id < ?4) OR (?5 IS NOT NULL AND finished_at < ?5))
                   AND {NOT_REFERRED}
                 ORDER BY id LIMIT ?6"
            ))?,
        };
        candidates(&mut reads, policy, limit)
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
            let mut tails = tx.prepare_cached(&format!(
                "DELETE FROM run_log_tails WHERE run_id = ?1
                   AND EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND status IN {ENDED})"
            ))?;
            let mut runs = tx.prepare_cached(&format!(
                "DELETE FROM runs WHERE id = ?1 AND status IN {ENDED}"
            ))?;
            for id in ids {
                events.execute([id])?;
                tails.execute([id])?;
                forgotten += runs.execute([id])?;
            }
        }
        tx.commit()?;
        // Copy the deleted pages into the database file now, on the pruner's time: left in the
        // write-ahead log, they would make the log pass SQLite's checkpoint threshold sooner,
        // and the checkpoint runs in whichever commit passes it, often a claim's.
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
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

/// The prune's index reads, as prepared statements of one connection: projects are found by
/// seeking `runs_by_project` from one name to the next, the N-th newest by walking back N
/// entries of the same index, the candidates by walking it forward from the project's oldest.
struct Reads<'c> {
    next_project: CachedStatement<'c>,
    nth_newest: CachedStatement<'c>,
    let_go: CachedStatement<'c>,
}

impl PruneReads for Reads<'_> {
    fn next_project(&mut self, after: &str) -> Result<Option<String>> {
        Ok(self
            .next_project
            .query_row([after], |r| r.get::<_, String>(0))
            .optional()?)
    }

    fn nth_newest(&mut self, project: &str, n: u32, started: bool) -> Result<Option<RunId>> {
        Ok(self
            .nth_newest
            .query_row(params![project, i64::from(n.max(1)) - 1, started], |r| {
                r.get(0)
            })
            .optional()?)
    }

    fn let_go(&mut self, q: &LetGo<'_>) -> Result<Vec<(RunId, Option<Millis>)>> {
        let rows = self.let_go.query_map(
            params![
                q.project,
                q.below,
                q.ended_before,
                q.by_count,
                q.by_age,
                // `usize::MAX` (no limit) wraps to -1: SQLite's "no limit".
                q.limit as i64,
                q.started,
                q.host
            ],
            |r| Ok((r.get::<_, RunId>(0)?, r.get::<_, Option<Millis>>(1)?)),
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
