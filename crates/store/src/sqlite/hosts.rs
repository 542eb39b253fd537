//! Many hosts, for SQLite (where one state directory is one host, but the interface is the
//! shared one): heartbeats, the host list, forgetting a host, the published config, and the
//! log tails of ended runs.
//!
//! It must never write for an epoch [`check_epoch`] refuses, and forgetting a host must end its
//! runs only through the one transition path (`transitions::apply_one`).

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::daemon::{check_epoch, host_from_row};
use super::runs::{collect_runs, RUN_COLUMNS};
use super::transitions::apply_one;
use super::SqliteStore;
use crate::decide::hosts::{forget_runs, may_forget, HOST_COLUMNS};
use crate::error::Result;
use crate::{
    FailureHooks, Forgotten, HostInfo, HostRow, LogTail, Millis, Published, Run, RunId, RunRows,
};

impl SqliteStore {
    /// [`crate::Store::heartbeat`].
    pub(crate) fn heartbeat(&self, epoch: i64, info: &HostInfo, now: Millis) -> Result<()> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_epoch(&tx, epoch)?;
        tx.execute(
            "UPDATE hosts SET heartbeat_at = ?2, config_version = ?3, config_digest = ?4, \
               http_addr = ?5 WHERE epoch = ?1",
            params![
                epoch,
                now,
                info.config_version,
                info.config_digest,
                info.http_addr
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// [`crate::Store::hosts`].
    pub(crate) fn hosts(&self) -> Result<Vec<HostRow>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!("SELECT {HOST_COLUMNS} FROM hosts ORDER BY name"))?;
        let rows = stmt.query_map([], host_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// [`crate::Store::active_rows_on`]: every active row (one state directory is one host).
    pub(crate) fn active_rows_on(&self, _host: &str) -> Result<RunRows> {
        self.active_rows()
    }

    /// [`crate::Store::forget_host`], in one `BEGIN IMMEDIATE` transaction.
    pub(crate) fn forget_host(
        &self,
        name: &str,
        by: &str,
        plan: &dyn Fn(&Run) -> Option<Millis>,
        hooks: &FailureHooks,
        now: Millis,
    ) -> Result<Forgotten> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let known = tx
            .query_row(
                "SELECT forgotten_at, forgotten_by FROM hosts WHERE name = ?1",
                [name],
                |r| {
                    Ok((
                        r.get::<_, Option<Millis>>(0)?,
                        r.get::<_, Option<String>>(1)?,
                    ))
                },
            )
            .optional()?;
        may_forget(name, known)?;
        let epoch: i64 = tx.query_row(
            "UPDATE meta SET value = value + 1 WHERE key = 'epoch' RETURNING value",
            [],
            |r| r.get(0),
        )?;
        tx.execute(
            "UPDATE hosts SET forgotten_epoch = CASE WHEN forgotten_at IS NULL THEN epoch \
                                                     ELSE forgotten_epoch END, \
               epoch = ?2, forgotten_at = ?3, forgotten_by = ?4 WHERE name = ?1",
            params![name, epoch, now, by],
        )?;
        let runs = {
            let mut stmt = tx.prepare(&format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('starting','running') \
                 AND host = ?1 ORDER BY id"
            ))?;
            collect_runs(&mut stmt, [name])?
        };
        let out = forget_runs(&runs, name, epoch, plan, |t| {
            apply_one(&tx, epoch, t, hooks, now)
        })?;
        tx.commit()?;
        Ok(out)
    }

    /// [`crate::Store::publish_config`].
    pub(crate) fn publish_config(
        &self,
        epoch: i64,
        text: &str,
        digest: &str,
        now: Millis,
    ) -> Result<i64> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let host = check_epoch(&tx, epoch)?;
        let current: Option<(i64, String)> = tx
            .query_row(
                "SELECT version, digest FROM published_config WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        if let Some((version, same)) = &current {
            if same == digest {
                return Ok(*version);
            }
        }
        let version: i64 = tx.query_row(
            "INSERT INTO published_config (id, version, digest, text, published_at, published_by) \
             VALUES (1, 1, ?1, ?2, ?3, ?4) \
             ON CONFLICT (id) DO UPDATE SET version = version + 1, digest = ?1, text = ?2, \
               published_at = ?3, published_by = ?4 RETURNING version",
            params![digest, text, now, host],
            |r| r.get(0),
        )?;
        tx.commit()?;
        Ok(version)
    }

    /// [`crate::Store::published_config`].
    pub(crate) fn published_config(&self) -> Result<Option<Published>> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                "SELECT version, digest, text, published_at, published_by \
                 FROM published_config WHERE id = 1",
                [],
                |r| {
                    Ok(Published {
                        version: r.get(0)?,
                        digest: r.get(1)?,
                        text: r.get(2)?,
                        published_at: r.get(3)?,
                        published_by: r.get(4)?,
                    })
                },
            )
            .optional()?)
    }

    /// [`crate::Store::store_log_tail`].
    pub(crate) fn store_log_tail(
        &self,
        epoch: i64,
        run: RunId,
        tail: &[u8],
        cut: bool,
    ) -> Result<()> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let host = check_epoch(&tx, epoch)?;
        tx.execute(
            "INSERT INTO run_log_tails (run_id, host, tail, cut) \
             SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM runs WHERE id = ?1) \
             ON CONFLICT (run_id) DO UPDATE SET host = ?2, tail = ?3, cut = ?4",
            params![run, host, tail, cut],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// [`crate::Store::log_tail`].
    pub(crate) fn log_tail(&self, run: RunId) -> Result<Option<LogTail>> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                "SELECT host, tail, cut FROM run_log_tails WHERE run_id = ?1",
                [run],
                |r| {
                    Ok(LogTail {
                        host: r.get(0)?,
                        tail: r.get(1)?,
                        cut: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }
}
