//! Hosts and epochs, for SQLite: taking over (a host row), recording the config in force, and
//! fencing writes from a daemon whose epoch is no longer held.
//!
//! The counter in `meta` only ever grows, by one per take-over and per forget. Every write that
//! licenses a side effect calls [`check_epoch`] first, inside its own transaction; nothing here
//! may lower the counter or write it elsewhere. One state directory is one host at a time, so
//! here only the newest epoch writes (whatever the host's name): the daemon lock already keeps
//! a second daemon out, and this keeps SQLite's behaviour what it was before hosts.

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

use super::SqliteStore;
use crate::decide::hosts::{fence, EpochFacts, HOST_COLUMNS, VERSION};
use crate::decide::run_ids::reserve;
use crate::error::Result;
use crate::{DaemonRow, HostRow, Millis, Reserved, RunId};

impl SqliteStore {
    /// [`crate::Store::take_over`]: the epoch bump, the host row, and every active run made
    /// this host's, in one transaction (one state directory is one host: runs claimed under
    /// another name, or before hosts existed, are this daemon's to recover).
    pub(crate) fn take_over(
        &self,
        host: &str,
        pid: i32,
        config_path: &str,
        caps_json: &str,
        now: Millis,
    ) -> Result<i64> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let epoch: i64 = tx.query_row(
            "UPDATE meta SET value = value + 1 WHERE key = 'epoch' RETURNING value",
            [],
            |r| r.get(0),
        )?;
        tx.execute(
            "INSERT INTO hosts (name, epoch, pid, started_at, heartbeat_at, version, caps_json, config_path, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, ?4) \
             ON CONFLICT (name) DO UPDATE SET epoch = ?2, pid = ?3, started_at = ?4, heartbeat_at = ?4, updated_at = ?4, \
               version = ?5, caps_json = ?6, config_path = ?7, config_version = NULL, \
               config_digest = NULL, http_addr = NULL, forgotten_at = NULL, forgotten_by = NULL, \
               reload_error = NULL",
            params![host, epoch, pid, now, VERSION, caps_json, config_path],
        )?;
        tx.execute(
            "UPDATE runs SET host = ?1 WHERE status IN ('starting','running') AND host IS NOT ?1",
            [host],
        )?;
        tx.commit()?;
        Ok(epoch)
    }

    /// [`crate::Store::reserve_epochs`]: the counter moved up to `highest`, never down.
    pub(crate) fn reserve_epochs(&self, highest: i64) -> Result<bool> {
        let moved = self.conn()?.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'epoch' AND value < ?1",
            [highest],
        )?;
        Ok(moved > 0)
    }

    /// [`crate::Store::reserve_run_ids`]: `runs.id` is `AUTOINCREMENT`, so SQLite numbers a
    /// new run from the larger of `sqlite_sequence`'s value and the largest id present.
    pub(crate) fn reserve_run_ids(&self, highest: RunId) -> Result<Reserved> {
        const LAST: &str =
            "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'runs'), 0), \
                                   COALESCE((SELECT MAX(id) FROM runs), 0))";
        let mut conn = self.conn()?;
        // Read first, without the write lock: at every start but after a restore, nothing
        // is to be written.
        let last: RunId = conn.query_row(LAST, [], |r| r.get(0))?;
        if reserve(last, highest) == Reserved::Ahead {
            return Ok(Reserved::Ahead);
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let last: RunId = tx.query_row(LAST, [], |r| r.get(0))?;
        let out = reserve(last, highest);
        if !matches!(out, Reserved::Moved { .. }) {
            return Ok(out);
        }
        let moved = tx.execute(
            "UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'runs'",
            [highest],
        )?;
        if moved == 0 {
            tx.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('runs', ?1)",
                [highest],
            )?;
        }
        tx.commit()?;
        Ok(out)
    }

    /// [`crate::Store::set_daemon_config`]; a row of another epoch is left as it is.
    pub(crate) fn set_daemon_config(
        &self,
        epoch: i64,
        caps_json: &str,
        reload_error: Option<&str>,
        now: Millis,
    ) -> Result<()> {
        let conn = self.conn()?;
        conn.execute(
            "UPDATE hosts SET caps_json = ?2, reload_error = ?3, updated_at = ?4 WHERE epoch = ?1",
            params![epoch, caps_json, reload_error, now],
        )?;
        Ok(())
    }

    /// [`crate::Store::daemon_row`]: the host that took over last (not forgotten).
    pub(crate) fn daemon_row(&self) -> Result<Option<DaemonRow>> {
        let conn = self.conn()?;
        let row = conn
            .query_row(
                &format!(
                    "SELECT {HOST_COLUMNS} FROM hosts WHERE forgotten_at IS NULL \
                     ORDER BY epoch DESC LIMIT 1"
                ),
                [],
                host_from_row,
            )
            .optional()?;
        Ok(row.map(DaemonRow::from))
    }

    /// [`crate::Store::epoch`].
    pub(crate) fn epoch(&self) -> Result<i64> {
        let conn = self.conn()?;
        Ok(
            conn.query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| {
                r.get(0)
            })?,
        )
    }
}

/// Maps a row selected as [`HOST_COLUMNS`] to a [`HostRow`].
pub(super) fn host_from_row(r: &Row<'_>) -> rusqlite::Result<HostRow> {
    Ok(HostRow {
        name: r.get(0)?,
        epoch: r.get(1)?,
        pid: r.get(2)?,
        started_at: r.get(3)?,
        heartbeat_at: r.get(4)?,
        version: r.get(5)?,
        config_version: r.get(6)?,
        config_digest: r.get(7)?,
        http_addr: r.get(8)?,
        forgotten_at: r.get(9)?,
        forgotten_by: r.get(10)?,
        caps_json: r.get(11)?,
        config_path: r.get(12)?,
        reload_error: r.get(13)?,
        updated_at: r.get(14)?,
        active_runs: r.get::<_, i64>(15)? as u64,
        // One state directory is one host: no clock but the local one, no other place.
        clock_offset_ms: None,
        place: None,
        stopped_at: None,
    })
}

/// Refuses the caller's transaction with [`crate::StoreError::Fenced`] unless `ours` is the
/// newest epoch and a host row holds it unforgotten; returns that host's name. Called inside
/// the write's own transaction, so no take-over or forget can slip in between.
pub(super) fn check_epoch(conn: &Connection, ours: i64) -> Result<String> {
    let current: i64 = conn
        .prepare_cached("SELECT value FROM meta WHERE key = 'epoch'")?
        .query_row([], |r| r.get(0))?;
    let holder: Option<String> = if current == ours {
        conn.prepare_cached("SELECT name FROM hosts WHERE epoch = ?1 AND forgotten_at IS NULL")?
            .query_row([ours], |r| r.get(0))
            .optional()?
    } else {
        None
    };
    let forgotten = holder.is_none()
        && conn
            .prepare_cached(
                "SELECT 1 FROM hosts WHERE forgotten_epoch = ?1 AND forgotten_at IS NOT NULL",
            )?
            .exists([ours])?;
    fence(
        ours,
        EpochFacts {
            current,
            holder,
            forgotten,
        },
    )
}
