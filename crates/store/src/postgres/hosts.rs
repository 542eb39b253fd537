//! Many hosts, for PostgreSQL: heartbeats, the host list, forgetting a host, the published
//! config, and the log tails of ended runs.
//!
//! It must never write for an epoch [`check_epoch`] refuses, and forgetting a host must end its
//! runs only through the one transition path (`transitions::apply_one`), which frees each
//! run's seats exactly once, under the run's row lock.

use super::daemon::{check_epoch, host_from_row, PG_HOST_COLUMNS};
use super::runs::{collect_rows, collect_runs, RUN_COLUMNS};
use super::transitions::apply_one;
use super::PgStore;
use crate::decide::hosts::{forget_runs, may_forget, HOST_COLUMNS};
use crate::error::Result;
use crate::{
    FailureHooks, Forgotten, HostInfo, HostRow, LogTail, Millis, Published, Run, RunId, RunRows,
};

impl PgStore {
    /// [`crate::Store::heartbeat`].
    pub(crate) fn heartbeat(&self, epoch: i64, info: &HostInfo, now: Millis) -> Result<()> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        check_epoch(&mut tx, epoch)?;
        tx.execute(
            "UPDATE hosts SET heartbeat_at = $2, config_version = $3, config_digest = $4, \
               http_addr = $5, clock_offset_ms = $6 WHERE epoch = $1",
            &[
                &epoch,
                &now,
                &info.config_version,
                &info.config_digest,
                &info.http_addr,
                &info.clock_offset_ms,
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// [`crate::Store::hosts`].
    pub(crate) fn hosts(&self) -> Result<Vec<HostRow>> {
        let mut conn = self.conn()?;
        conn.query(
            &format!("SELECT {HOST_COLUMNS}, {PG_HOST_COLUMNS} FROM hosts ORDER BY name"),
            &[],
        )?
        .iter()
        .map(host_from_row)
        .collect()
    }

    /// [`crate::Store::active_rows_on`]: the active rows `host` claimed.
    pub(crate) fn active_rows_on(&self, host: &str) -> Result<RunRows> {
        let mut conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('starting','running') AND host = $1 \
             ORDER BY id"
        );
        collect_rows(conn.query(&sql, &[&host])?)
    }

    /// [`crate::Store::active_rows_here`]: the active rows `host` claimed, but those claimed by
    /// a daemon of another place than epoch `epoch`'s (their files are there).
    pub(crate) fn active_rows_here(&self, host: &str, epoch: i64) -> Result<RunRows> {
        let mut conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('starting','running') AND host = $1 \
             AND NOT EXISTS (SELECT 1 FROM host_epochs claimed JOIN host_epochs us ON us.epoch = $2 \
                 WHERE claimed.epoch = runs.epoch \
                   AND claimed.state_dir_id IS NOT NULL AND us.state_dir_id IS NOT NULL \
                   AND (claimed.machine, claimed.state_dir_id) \
                       IS DISTINCT FROM (us.machine, us.state_dir_id)) \
             ORDER BY id"
        );
        collect_rows(conn.query(&sql, &[&host, &epoch])?)
    }

    /// [`crate::Store::forget_host`], in one transaction. The host row is locked first
    /// (`FOR UPDATE`): its daemon's writes in flight (which hold it `FOR SHARE`) finish first,
    /// and its later ones find the epoch gone.
    pub(crate) fn forget_host(
        &self,
        name: &str,
        by: &str,
        plan: &dyn Fn(&Run) -> Option<Millis>,
        hooks: &FailureHooks,
        now: Millis,
    ) -> Result<Forgotten> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        let known = tx.query_opt(
            "SELECT forgotten_at, forgotten_by FROM hosts WHERE name = $1 FOR UPDATE",
            &[&name],
        )?;
        let known = match known {
            Some(r) => Some((r.try_get(0)?, r.try_get(1)?)),
            None => None,
        };
        may_forget(name, known)?;
        let epoch: i64 = tx
            .query_one(
                "UPDATE meta SET value = value + 1 WHERE key = 'epoch' RETURNING value",
                &[],
            )?
            .try_get(0)?;
        tx.execute(
            "UPDATE hosts SET forgotten_epoch = CASE WHEN forgotten_at IS NULL THEN epoch \
                                                     ELSE forgotten_epoch END, \
               epoch = $2, forgotten_at = $3, forgotten_by = $4 WHERE name = $1",
            &[&name, &epoch, &now, &by],
        )?;
        let runs = collect_runs(tx.query(
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('starting','running') \
                 AND host = $1 ORDER BY id FOR UPDATE"
            ),
            &[&name],
        )?)?;
        let out = forget_runs(&runs, name, epoch, plan, |t| {
            apply_one(&mut tx, epoch, t, hooks, now)
        })?;
        tx.commit()?;
        Ok(out)
    }

    /// [`crate::Store::publish_config`]. The row is locked (`FOR UPDATE`), so the publish waits
    /// for every claim in flight (each reads it `FOR SHARE`), and every later claim sees it.
    pub(crate) fn publish_config(
        &self,
        epoch: i64,
        text: &str,
        digest: &str,
        now: Millis,
    ) -> Result<i64> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        let host = check_epoch(&mut tx, epoch)?;
        let current = tx.query_opt(
            "SELECT version, digest FROM published_config WHERE id = 1 FOR UPDATE",
            &[],
        )?;
        if let Some(row) = current {
            let same: String = row.try_get(1)?;
            if same == digest {
                return Ok(row.try_get(0)?);
            }
        }
        let version: i64 = tx
            .query_one(
                "INSERT INTO published_config (id, version, digest, text, published_at, published_by) \
                 VALUES (1, 1, $1, $2, $3, $4) \
                 ON CONFLICT (id) DO UPDATE SET version = published_config.version + 1, \
                   digest = $1, text = $2, published_at = $3, published_by = $4 RETURNING version",
                &[&digest, &text, &now, &host],
            )?
            .try_get(0)?;
        tx.commit()?;
        Ok(version)
    }

    /// [`crate::Store::published_config`].
    pub(crate) fn published_config(&self) -> Result<Option<Published>> {
        let mut conn = self.conn()?;
        let row = conn.query_opt(
            "SELECT version, digest, text, published_at, published_by \
             FROM published_config WHERE id = 1",
            &[],
        )?;
        row.map(|r| {
            Ok(Published {
                version: r.try_get(0)?,
                digest: r.try_get(1)?,
                text: r.try_get(2)?,
                published_at: r.try_get(3)?,
                published_by: r.try_get(4)?,
            })
        })
        .transpose()
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
        let mut tx = conn.transaction()?;
        let host = check_epoch(&mut tx, epoch)?;
        tx.execute(
            "INSERT INTO run_log_tails (run_id, host, tail, cut) \
             SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM runs WHERE id = $1) \
             ON CONFLICT (run_id) DO UPDATE SET host = $2, tail = $3, cut = $4",
            &[&run, &host, &tail, &cut],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// [`crate::Store::log_tail`].
    pub(crate) fn log_tail(&self, run: RunId) -> Result<Option<LogTail>> {
        let mut conn = self.conn()?;
        let row = conn.query_opt(
            "SELECT host, tail, cut FROM run_log_tails WHERE run_id = $1",
            &[&run],
        )?;
        row.map(|r| {
            Ok(LogTail {
                host: r.try_get(0)?,
                tail: r.try_get(1)?,
                cut: r.try_get(2)?,
            })
        })
        .transpose()
    }
}

impl PgStore {
    /// [`crate::Store::seat_problems`]: seats held by a run that is not active (freed never, or
    /// twice over a second claim), and active runs that hold no global seat.
    pub(crate) fn seat_problems(&self) -> Result<Vec<(RunId, String)>> {
        let mut conn = self.conn()?;
        let rows = conn.query(
            "SELECT s.run_id, format('run %s holds %s seat %s of %L but is %s', s.run_id, \
                      s.kind, s.seat, s.name, coalesce(r.status, 'unknown to the database')) \
             FROM cap_seats s LEFT JOIN runs r ON r.id = s.run_id \
             WHERE s.run_id IS NOT NULL \
               AND (r.id IS NULL OR r.status NOT IN ('starting','running')) \
             UNION ALL \
             SELECT r.id, format('run %s is %s but holds no global seat', r.id, r.status) \
             FROM runs r WHERE r.status IN ('starting','running') \
               AND NOT EXISTS (SELECT 1 FROM cap_seats s WHERE s.run_id = r.id \
                                 AND s.kind = 'global') \
             ORDER BY 1",
            &[],
        )?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }
}
