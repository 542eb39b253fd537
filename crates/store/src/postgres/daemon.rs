//! The daemon row and the epoch, for PostgreSQL: taking over, recording the config in force,
//! and fencing writes from a daemon that has been taken over.
//!
//! The epoch in `meta` only ever grows, by one per take-over. Every write that licenses a side
//! effect calls [`check_epoch`] first, inside its own transaction.

use postgres::Transaction;

use super::PgStore;
use crate::error::Result;
use crate::{DaemonRow, Millis, StoreError};

impl PgStore {
    /// [`crate::Store::take_over`]: the epoch bump and the daemon row in one transaction. The
    /// update's row lock waits for every write holding the epoch `FOR SHARE`.
    pub(crate) fn take_over(
        &self,
        pid: i32,
        config_path: &str,
        caps_json: &str,
        now: Millis,
    ) -> Result<i64> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        let epoch: i64 = tx
            .query_one(
                "UPDATE meta SET value = value + 1 WHERE key = 'epoch' RETURNING value",
                &[],
            )?
            .get(0);
        tx.execute(
            "INSERT INTO daemon (id, pid, epoch, started_at, config_path, caps_json, reload_error, updated_at) \
             VALUES (1, $1, $2, $3, $4, $5, NULL, $3) \
             ON CONFLICT (id) DO UPDATE SET pid = $1, epoch = $2, started_at = $3, config_path = $4, \
               caps_json = $5, reload_error = NULL, updated_at = $3",
            &[&i64::from(pid), &epoch, &now, &config_path, &caps_json],
        )?;
        tx.commit()?;
        Ok(epoch)
    }

    /// [`crate::Store::set_daemon_config`]; a row of another epoch is left as it is.
    pub(crate) fn set_daemon_config(
        &self,
        epoch: i64,
        caps_json: &str,
        reload_error: Option<&str>,
        now: Millis,
    ) -> Result<()> {
        let mut conn = self.conn()?;
        conn.execute(
            "UPDATE daemon SET caps_json = $2, reload_error = $3, updated_at = $4 WHERE epoch = $1",
            &[&epoch, &caps_json, &reload_error, &now],
        )?;
        Ok(())
    }

    /// [`crate::Store::daemon_row`].
    pub(crate) fn daemon_row(&self) -> Result<Option<DaemonRow>> {
        let mut conn = self.conn()?;
        let row = conn.query_opt(
            "SELECT pid, epoch, started_at, config_path, caps_json, reload_error, updated_at \
             FROM daemon WHERE id = 1",
            &[],
        )?;
        Ok(row.map(|r| DaemonRow {
            pid: r.get::<_, i64>(0) as i32,
            epoch: r.get(1),
            started_at: r.get(2),
            config_path: r.get(3),
            caps_json: r.get(4),
            reload_error: r.get(5),
            updated_at: r.get(6),
        }))
    }

    /// [`crate::Store::epoch`].
    pub(crate) fn epoch(&self) -> Result<i64> {
        let mut conn = self.conn()?;
        Ok(conn
            .query_one("SELECT value FROM meta WHERE key = 'epoch'", &[])?
            .get(0))
    }
}

/// Refuses the caller's transaction with [`StoreError::Fenced`] unless `ours` is the current
/// epoch. The row is read `FOR SHARE`: held until the caller commits, so no take-over can slip in
/// between the check and the write it guards (and one in progress is waited for).
pub(super) fn check_epoch(tx: &mut Transaction<'_>, ours: i64) -> Result<()> {
    let current: i64 = tx
        .query_one("SELECT value FROM meta WHERE key = 'epoch' FOR SHARE", &[])?
        .get(0);
    if current != ours {
        return Err(StoreError::Fenced { ours, current });
    }
    Ok(())
}
