//! Counts of runs by status, for summaries, on PostgreSQL.

use super::PgStore;
use crate::error::Result;
use crate::RunStatus;

impl PgStore {
    /// How many runs are in `status` (an index on status answers it).
    pub(crate) fn count_runs(&self, status: RunStatus) -> Result<u64> {
        let mut conn = self.conn()?;
        let n: i64 = conn
            .query_one(
                "SELECT COUNT(*) FROM runs WHERE status = $1",
                &[&status.as_str()],
            )?
            .get(0);
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
