//! Pruning, for PostgreSQL: the same operations as the SQLite backend's `prune` (see there for
//! the why). Selection reads by index walks; forgetting deletes only runs still ended, with
//! their events, in one short transaction. Space: PostgreSQL's autovacuum reuses the freed
//! space, so nothing is handed back by hand.

use super::PgStore;
use crate::error::Result;
use crate::prune::{PruneCandidate, PrunePolicy};
use crate::RunId;

/// The statuses a run can be let go in.
const ENDED: &str = "('succeeded','failed','timed_out','cancelled','lost')";

/// A run is held while a queued or active run refers to it (see the SQLite backend).
const NOT_REFERRED: &str = "NOT EXISTS (SELECT 1 FROM runs AS r \
      WHERE r.status IN ('queued','starting','running') \
        AND (r.hook_of = runs.id OR r.retry_of = runs.id OR r.rerun_of = runs.id))";

impl PgStore {
    /// [`crate::Store::prune_candidates`].
    pub(crate) fn prune_candidates(
        &self,
        policy: &PrunePolicy,
        limit: usize,
    ) -> Result<Vec<PruneCandidate>> {
        let mut conn = self.conn()?;
        let mut out = Vec::new();
        let mut after = String::new();
        let nth_sql = format!(
            "SELECT id FROM runs WHERE project = $1 AND status IN {ENDED} \
               AND (started_at IS NOT NULL) = $3 \
             ORDER BY id DESC LIMIT 1 OFFSET $2"
        );
        let let_go_sql = format!(
            "SELECT id, finished_at FROM runs \
             WHERE project = $1 AND id < $2 AND status IN {ENDED} AND finished_at < $3 \
               AND (started_at IS NOT NULL) = $7 \
               AND (($4::bigint IS NOT NULL AND id < $4::bigint) \
                 OR ($5::bigint IS NOT NULL AND finished_at < $5::bigint)) \
               AND {NOT_REFERRED} \
             ORDER BY id LIMIT $6"
        );
        while out.len() < limit {
            let Some(row) = conn.query_opt(
                "SELECT project FROM runs WHERE project > $1 ORDER BY project LIMIT 1",
                &[&after],
            )?
            else {
                break;
            };
            let project: String = row.try_get(0)?;
            after.clone_from(&project);
            let keep = policy.keep_for(&project);
            if keep.keeps_all() {
                continue;
            }
            for started in [true, false] {
                if out.len() >= limit {
                    break;
                }
                let mut nth = |n: u32| -> Result<Option<RunId>> {
                    let offset = i64::from(n.max(1)) - 1;
                    Ok(
                        match conn.query_opt(&nth_sql, &[&project, &offset, &started])? {
                            Some(r) => Some(r.try_get(0)?),
                            None => None,
                        },
                    )
                };
                let newest = if started {
                    match nth(1)? {
                        Some(id) => id,
                        None => continue,
                    }
                } else {
                    RunId::MAX
                };
                let by_count = match keep.newest {
                    Some(n) => nth(n)?,
                    None => None,
                };
                if by_count.is_none() && keep.finished_after.is_none() {
                    continue;
                }
                let rows = conn.query(
                    &let_go_sql,
                    &[
                        &project,
                        &newest,
                        &policy.ended_before,
                        &by_count,
                        &keep.finished_after,
                        // `usize::MAX` (no limit) must not wrap to a negative LIMIT.
                        &i64::try_from(limit - out.len()).unwrap_or(i64::MAX),
                        &started,
                    ],
                )?;
                for r in rows {
                    let finished_at: Option<i64> = r.try_get(1)?;
                    out.push(PruneCandidate {
                        id: r.try_get(0)?,
                        project: project.clone(),
                        finished_at: finished_at.unwrap_or(0),
                    });
                }
            }
        }
        Ok(out)
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
        let n = tx.execute("DELETE FROM runs WHERE id = ANY($1)", &[&locked])?;
        tx.commit()?;
        Ok(n as usize)
    }
}
