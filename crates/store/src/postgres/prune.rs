//! Pruning, for PostgreSQL: the same operations as the SQLite backend's `prune` (see there for
//! the why). Selection reads by index walks; forgetting deletes only runs still ended, with
//! their events, in one short transaction. Space: PostgreSQL's autovacuum reuses the freed
//! space, so nothing is handed back by hand.

use super::PgStore;
use crate::decide::prune::{candidates, LetGo, PruneReads};
use crate::error::Result;
use crate::prune::{PruneCandidate, PrunePolicy};
use crate::{Millis, RunId};

/// The statuses a run can be let go in.
const ENDED: &str = "('succeeded','failed','timed_out','cancelled','lost')";

/// A run is held while a queued or active run refers to it (see the SQLite backend).
const NOT_REFERRED: &str = "NOT EXISTS (SELECT 1 FROM runs AS r \
      WHERE r.status IN ('queued','starting','running') \
        AND (r.hook_of = runs.id OR r.retry_of = runs.id OR r.rerun_of = runs.id))";

impl PgStore {
    /// [`crate::Store::prune_candidates`]: the rule of [`crate::decide::prune`] over the
    /// index reads of [`Reads`].
    pub(crate) fn prune_candidates(
        &self,
        policy: &PrunePolicy,
        limit: usize,
    ) -> Result<Vec<PruneCandidate>> {
        let mut conn = self.conn()?;
        candidates(&mut Reads { conn: &mut conn }, policy, limit)
    }

    /// [`crate::Store::forget_runs`].
    pub(crate) fn forget_runs(&self, ids: &[RunId]) -> Result<usize> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        // Lock the rows still ended, then delete their events and themselves.
        let locked: Vec<RunId> = tx
            .query(
                &format!(
                    "SELECT id FROM runs WHERE id = ANY($1) AND status IN {ENDED} \
                     ORDER BY id FOR UPDATE"
                ),
                &[&ids],
            )?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<_, _>>()?;
        tx.execute("DELETE FROM events WHERE run_id = ANY($1)", &[&locked])?;
        tx.execute(
            "DELETE FROM run_log_tails WHERE run_id = ANY($1)",
            &[&locked],
        )?;
        let n = tx.execute("DELETE FROM runs WHERE id = ANY($1)", &[&locked])?;
        tx.commit()?;
        Ok(n as usize)
    }
}

/// The prune's index reads on one pooled connection.
struct Reads<'c> {
    conn: &'c mut postgres::Client,
}

impl PruneReads for Reads<'_> {
    fn next_project(&mut self, after: &str) -> Result<Option<String>> {
        let row = self.conn.query_opt(
            "SELECT project FROM runs WHERE project > $1 ORDER BY project LIMIT 1",
            &[&after],
        )?;
        Ok(match row {
            Some(r) => Some(r.try_get(0)?),
            None => None,
        })
    }

    fn nth_newest(&mut self, project: &str, n: u32, started: bool) -> Result<Option<RunId>> {
        let offset = i64::from(n.max(1)) - 1;
        let row = self.conn.query_opt(
            &format!(
                "SELECT id FROM runs WHERE project = $1 AND status IN {ENDED} \
                   AND (started_at IS NOT NULL) = $3 \
                 ORDER BY id DESC LIMIT 1 OFFSET $2"
            ),
            &[&project, &offset, &started],
        )?;
        Ok(match row {
            Some(r) => Some(r.try_get(0)?),
            None => None,
        })
    }

    fn let_go(&mut self, q: &LetGo<'_>) -> Result<Vec<(RunId, Option<Millis>)>> {
        let rows = self.conn.query(
            &format!(
                "SELECT id, finished_at FROM runs \
                 WHERE project = $1 AND id < $2 AND status IN {ENDED} AND finished_at < $3 \
                   AND (started_at IS NOT NULL) = $7 \
                   AND ($8::text IS NULL OR host = $8::text) \
                   AND (($4::bigint IS NOT NULL AND id < $4::bigint) \
                     OR ($5::bigint IS NOT NULL AND finished_at < $5::bigint)) \
                   AND {NOT_REFERRED} \
                 ORDER BY id LIMIT $6"
            ),
            &[
                &q.project,
                &q.below,
                &q.ended_before,
                &q.by_count,
                &q.by_age,
                // `usize::MAX` (no limit) must not wrap to a negative LIMIT.
                &i64::try_from(q.limit).unwrap_or(i64::MAX),
                &q.started,
                &q.host,
            ],
        )?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }
}
