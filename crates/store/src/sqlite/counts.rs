//! Counts of runs by status, for summaries.

use super::SqliteStore;
use crate::error::Result;
use crate::RunStatus;

impl SqliteStore {
    /// How many runs are in `status` (the status index answers it without reading the rows).
    pub(crate) fn count_runs(&self, status: RunStatus) -> Result<u64> {
        let conn = self.conn()?;
        let n: i64 = conn
            .prepare_cached("SELECT COUNT(*) FROM runs WHERE status = ?1")?
            .query_row([status.as_str()], |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
