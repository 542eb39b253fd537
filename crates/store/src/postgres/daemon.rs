//! Hosts and epochs, for PostgreSQL: taking over (a host row), recording the config in force,
//! and fencing writes from a daemon whose epoch is no longer held.
//!
//! The counter in `meta` only ever grows, by one per take-over and per forget, so an epoch
//! names one incarnation of one host. Every write that licenses a side effect calls
//! [`check_epoch`] first, inside its own transaction: it reads the host row holding the epoch
//! `FOR SHARE`, so a take-over or a forget of that host (which update the row) waits for the
//! writes in flight, and hosts of different names never wait on each other.

use postgres::{Row, Transaction};

use super::PgStore;
use crate::decide::hosts::{fence, may_take_over, EpochFacts, Holder, HOST_COLUMNS, VERSION};
use crate::decide::run_ids::reserve;
use crate::error::Result;
use crate::{DaemonRow, HostRow, Millis, Place, Reserved, RunId};

impl PgStore {
    /// [`crate::Store::take_over`]: the epoch bump, the host row, and the active runs no host
    /// owns yet (claimed before the database knew hosts) made this host's, in one transaction.
    /// The row update waits for every write of the previous daemon of this host holding it
    /// `FOR SHARE`.
    pub(crate) fn take_over(
        &self,
        host: &str,
        place: Option<&Place>,
        pid: i32,
        config_path: &str,
        caps_json: &str,
        now: Millis,
    ) -> Result<i64> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        // Two daemons taking a name no row holds yet would each find nothing to lock below:
        // the name itself is locked first, for this transaction, so that the second waits and
        // then finds the first's row.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1)::bigint)",
            &[&format!("fleet host {host}")],
        )?;
        // The row as it is, locked, and the database's time: whether its daemon is alive
        // elsewhere is judged by the database's clock, never by the caller's.
        let held = tx.query_opt(
            "SELECT machine, state_dir_id, pid, heartbeat_at, \
               (forgotten_at IS NOT NULL OR stopped_at IS NOT NULL), \
               (extract(epoch FROM clock_timestamp()) * 1000)::bigint \
             FROM hosts WHERE name = $1 FOR UPDATE",
            &[&host],
        )?;
        let (holder, db_now) = match held {
            None => (None, now),
            Some(r) => {
                let machine: Option<String> = r.try_get(0)?;
                let dir: Option<String> = r.try_get(1)?;
                let holder = Holder {
                    place: machine.zip(dir).map(|(machine, state_dir_id)| Place {
                        machine,
                        state_dir_id,
                    }),
                    pid: r.try_get::<_, i64>(2)? as i32,
                    heartbeat_at: r.try_get(3)?,
                    gone: r.try_get(4)?,
                };
                (Some(holder), r.try_get(5)?)
            }
        };
        may_take_over(host, place, holder, db_now)?;
        let machine = place.map(|p| p.machine.as_str());
        let dir = place.map(|p| p.state_dir_id.as_str());
        let epoch: i64 = tx
            .query_one(
                "UPDATE meta SET value = value + 1 WHERE key = 'epoch' RETURNING value",
                &[],
            )?
            .get(0);
        tx.execute(
            "INSERT INTO hosts (name, epoch, pid, started_at, heartbeat_at, version, caps_json, config_path, updated_at, \
               machine, state_dir_id) \
             VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $4, $8, $9) \
             ON CONFLICT (name) DO UPDATE SET epoch = $2, pid = $3, started_at = $4, heartbeat_at = $4, updated_at = $4, \
               version = $5, caps_json = $6, config_path = $7, config_version = NULL, \
               config_digest = NULL, http_addr = NULL, forgotten_at = NULL, forgotten_by = NULL, \
               reload_error = NULL, clock_offset_ms = NULL, stopped_at = NULL, \
               machine = $8, state_dir_id = $9",
            &[&host, &epoch, &i64::from(pid), &now, &VERSION, &caps_json, &config_path, &machine, &dir],
        )?;
        tx.execute(
            "INSERT INTO host_epochs (epoch, host, machine, state_dir_id) VALUES ($1, $2, $3, $4)",
            &[&epoch, &host, &machine, &dir],
        )?;
        // Runs claimed before hosts existed belong to the first host that takes over: on an
        // upgrade that is the one host there was.
        tx.execute(
            "UPDATE runs SET host = $1 WHERE host IS NULL AND status IN ('starting','running')",
            &[&host],
        )?;
        tx.commit()?;
        Ok(epoch)
    }

    /// [`crate::Store::reserve_epochs`]: the counter moved up to `highest`, never down.
    pub(crate) fn reserve_epochs(&self, highest: i64) -> Result<bool> {
        let moved = self.conn()?.execute(
            "UPDATE meta SET value = $1 WHERE key = 'epoch' AND value < $1",
            &[&highest],
        )?;
        Ok(moved > 0)
    }

    /// [`crate::Store::reserve_run_ids`]: `runs.id` is an identity column, numbered by its
    /// sequence. Moving the sequence is done under a lock that keeps every other host from
    /// inserting (or changing) a run meanwhile, so no id another host just drew is handed out
    /// again; it is taken only when the sequence is behind, which a running fleet never is.
    pub(crate) fn reserve_run_ids(&self, highest: RunId) -> Result<Reserved> {
        let mut conn = self.conn()?;
        let last = |tx: &mut Transaction<'_>| -> Result<RunId> {
            // The id the sequence hands out next (at least 1), less one.
            let next: RunId = tx
                .query_one(
                    "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END \
                     FROM runs_id_seq",
                    &[],
                )?
                .get(0);
            Ok(next - 1)
        };
        let mut tx = conn.transaction()?;
        if reserve(last(&mut tx)?, highest) == Reserved::Ahead {
            return Ok(Reserved::Ahead);
        }
        tx.batch_execute("LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE")?;
        let out = reserve(last(&mut tx)?, highest);
        if !matches!(out, Reserved::Moved { .. }) {
            return Ok(out);
        }
        tx.execute("SELECT setval('runs_id_seq', $1, true)", &[&highest])?;
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
        let mut conn = self.conn()?;
        conn.execute(
            "UPDATE hosts SET caps_json = $2, reload_error = $3, updated_at = $4 WHERE epoch = $1",
            &[&epoch, &caps_json, &reload_error, &now],
        )?;
        Ok(())
    }

    /// [`crate::Store::record_stop`]; a row of another epoch, or forgotten, is left as it is.
    pub(crate) fn record_stop(&self, epoch: i64, now: Millis) -> Result<()> {
        self.conn()?.execute(
            "UPDATE hosts SET stopped_at = $2 WHERE epoch = $1 AND forgotten_at IS NULL",
            &[&epoch, &now],
        )?;
        Ok(())
    }

    /// [`crate::Store::daemon_row`]: the host that took over last (not forgotten).
    pub(crate) fn daemon_row(&self) -> Result<Option<DaemonRow>> {
        let mut conn = self.conn()?;
        let row = conn.query_opt(
            &format!(
                "SELECT {HOST_COLUMNS}, {PG_HOST_COLUMNS} FROM hosts WHERE forgotten_at IS NULL \
                 ORDER BY epoch DESC LIMIT 1"
            ),
            &[],
        )?;
        Ok(row
            .map(|r| host_from_row(&r))
            .transpose()?
            .map(DaemonRow::from))
    }

    /// [`crate::Store::epoch`].
    pub(crate) fn epoch(&self) -> Result<i64> {
        let mut conn = self.conn()?;
        Ok(conn
            .query_one("SELECT value FROM meta WHERE key = 'epoch'", &[])?
            .get(0))
    }
}

/// The columns of a `hosts` row only PostgreSQL has, selected after [`HOST_COLUMNS`].
pub(super) const PG_HOST_COLUMNS: &str = "clock_offset_ms, machine, state_dir_id, stopped_at";

/// Maps a row selected as [`HOST_COLUMNS`], then [`PG_HOST_COLUMNS`], to a [`HostRow`].
pub(super) fn host_from_row(r: &Row) -> Result<HostRow> {
    let machine: Option<String> = r.try_get(17)?;
    let dir: Option<String> = r.try_get(18)?;
    Ok(HostRow {
        name: r.try_get(0)?,
        epoch: r.try_get(1)?,
        pid: r.try_get::<_, i64>(2)? as i32,
        started_at: r.try_get(3)?,
        heartbeat_at: r.try_get(4)?,
        version: r.try_get(5)?,
        config_version: r.try_get(6)?,
        config_digest: r.try_get(7)?,
        http_addr: r.try_get(8)?,
        forgotten_at: r.try_get(9)?,
        forgotten_by: r.try_get(10)?,
        caps_json: r.try_get(11)?,
        config_path: r.try_get(12)?,
        reload_error: r.try_get(13)?,
        updated_at: r.try_get(14)?,
        active_runs: r.try_get::<_, i64>(15)? as u64,
        clock_offset_ms: r.try_get(16)?,
        place: machine.zip(dir).map(|(machine, state_dir_id)| Place {
            machine,
            state_dir_id,
        }),
        stopped_at: r.try_get(19)?,
    })
}

/// Refuses the caller's transaction with [`crate::StoreError::Fenced`] unless a host row holds
/// `ours` unforgotten; returns that host's name. The row is read `FOR SHARE`: held until the
/// caller commits, so no take-over or forget of this host can slip in between the check and
/// the write it guards (and one in progress is waited for, then seen).
pub(super) fn check_epoch(tx: &mut Transaction<'_>, ours: i64) -> Result<String> {
    let holder: Option<String> = tx
        .query_opt(
            "SELECT name FROM hosts WHERE epoch = $1 AND forgotten_at IS NULL FOR SHARE",
            &[&ours],
        )?
        .map(|r| r.try_get(0))
        .transpose()?;
    let (current, forgotten) = match holder {
        Some(_) => (ours, false),
        None => {
            let r = tx.query_one(
                "SELECT (SELECT value FROM meta WHERE key = 'epoch'), \
                   EXISTS (SELECT 1 FROM hosts WHERE forgotten_epoch = $1 \
                             AND forgotten_at IS NOT NULL)",
                &[&ours],
            )?;
            (r.try_get(0)?, r.try_get(1)?)
        }
    };
    fence(
        ours,
        EpochFacts {
            current,
            holder,
            forgotten,
        },
    )
}
