//! [`Store`]'s operations for many hosts on one database: heartbeats, the host list,
//! forgetting a host, the published config, and the log tails of ended runs.
//!
//! A front like `store`: each method is one `match` on the backend. It must never hold SQL or a
//! driver type of its own.

use crate::error::Result;
use crate::store::Backend;
use crate::{
    FailureHooks, Forgotten, HostInfo, HostRow, LogTail, Millis, Published, Run, RunId, RunRows,
    Store,
};

impl Store {
    /// [`Store::take_over`] by a daemon that runs at `place` (its machine and state directory),
    /// recorded in the host row and with the epoch, so that the runs it claims are settled only
    /// from that place ([`Store::active_rows_here`]). On PostgreSQL, refused
    /// ([`StoreError::HostAlive`](crate::StoreError::HostAlive), nothing written) while the
    /// host's daemon runs in another place and is alive by the database's clock; a place of
    /// `None` (or a row without one) refuses nothing. SQLite, where one state directory is one
    /// host, records no place.
    ///
    /// Errors: busy database (nothing written), the host alive elsewhere.
    pub fn take_over_from(
        &self,
        host: &str,
        place: Option<&crate::Place>,
        pid: i32,
        config_path: &str,
        caps_json: &str,
        now: Millis,
    ) -> Result<i64> {
        match &self.backend {
            Backend::Sqlite(db) => db.take_over(host, pid, config_path, caps_json, now),
            Backend::Postgres(db) => db.take_over(host, place, pid, config_path, caps_json, now),
        }
    }

    /// Records that the daemon of epoch `epoch` is alive at `now` (ms UTC), with what it
    /// reports (`info`). Fenced like any write: a forgotten or taken-over daemon learns it here
    /// ([`StoreError::Fenced`](crate::StoreError::Fenced)), even when idle.
    ///
    /// Errors: busy database, fencing.
    pub fn heartbeat(&self, epoch: i64, info: &HostInfo, now: Millis) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(db) => db.heartbeat(epoch, info, now),
            Backend::Postgres(db) => db.heartbeat(epoch, info, now),
        }
    }

    /// Every host that ever took over this database, by name, with its active runs counted.
    ///
    /// Errors: the database's.
    pub fn hosts(&self) -> Result<Vec<HostRow>> {
        match &self.backend {
            Backend::Sqlite(db) => db.hosts(),
            Backend::Postgres(db) => db.hosts(),
        }
    }

    /// The active runs host `host` claimed: the ones its daemon recovers, reaps and stops.
    /// SQLite (one state directory is one host): every active run.
    ///
    /// Errors: the database's.
    pub fn active_runs_on(&self, host: &str) -> Result<Vec<Run>> {
        crate::store::readable(self.active_rows_on(host)?)
    }

    /// The active rows host `host` claimed, as [`Store::active_rows`] sorts them: the runs
    /// this version can read, and apart those it cannot. SQLite: every active row.
    ///
    /// Errors: the database's (a row's own unreadable value is not one).
    pub fn active_rows_on(&self, host: &str) -> Result<RunRows> {
        match &self.backend {
            Backend::Sqlite(db) => db.active_rows_on(host),
            Backend::Postgres(db) => db.active_rows_on(host),
        }
    }

    /// The active rows host `host` claimed from the place (machine and state directory) the
    /// daemon of epoch `epoch` runs at: the runs whose files that daemon has, and so may settle.
    /// A run claimed under the same host name by a daemon of another place is left out: its
    /// files are there, and only a daemon there (or an operator's forget) may end it. SQLite:
    /// every active row.
    ///
    /// Errors: the database's (a row's own unreadable value is not one).
    pub fn active_rows_here(&self, host: &str, epoch: i64) -> Result<RunRows> {
        match &self.backend {
            Backend::Sqlite(db) => db.active_rows(),
            Backend::Postgres(db) => db.active_rows_here(host, epoch),
        }
    }

    /// Records that the daemon of epoch `epoch` stopped cleanly at `now`: its host is silent at
    /// once, and may be taken over from another place. PostgreSQL only (on SQLite the daemon
    /// lock says whether a daemon runs); a row of another epoch is left as it is.
    ///
    /// Errors: the database's.
    pub fn record_stop(&self, epoch: i64, now: Millis) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(db) => db.record_stop(epoch, now),
        }
    }

    /// The database's clock, measured by one query timed by this process's monotonic clock
    /// (see [`crate::db_clock`]). `None` on SQLite, whose clock is the local one.
    ///
    /// Errors: the database's.
    pub fn database_clock(&self) -> Result<Option<crate::db_clock::ClockReading>> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(db) => db.database_clock().map(Some),
        }
    }

    /// `fleet hosts forget NAME`: the operator's statement that host `name` is gone. In ONE
    /// transaction: the host's epoch takes the next value (its daemon's later writes are
    /// refused as [`StoreError::Fenced`](crate::StoreError::Fenced) with `forgotten`), the host
    /// is marked forgotten (by `by`, at `now`), and each of its active runs ends `lost` through
    /// the one transition path — its seats freed there, exactly once — with the retry `plan`
    /// chooses (`Some(not_before)`: queue the next attempt; the caller's retry policy) and the
    /// failure hooks in force. Does not look at the heartbeat: refusing a live host is the
    /// caller's business.
    ///
    /// Errors: [`StoreError::UnknownHost`](crate::StoreError::UnknownHost) for a name no host
    /// ever took over with; [`StoreError::AlreadyForgotten`](crate::StoreError::AlreadyForgotten)
    /// for a host forgotten and not back since (nothing written: its epoch and `forgotten_by`
    /// stay the first forget's); busy database (nothing written).
    pub fn forget_host(
        &self,
        name: &str,
        by: &str,
        plan: &dyn Fn(&Run) -> Option<Millis>,
        hooks: &FailureHooks,
        now: Millis,
    ) -> Result<Forgotten> {
        match &self.backend {
            Backend::Sqlite(db) => db.forget_host(name, by, plan, hooks, now),
            Backend::Postgres(db) => db.forget_host(name, by, plan, hooks, now),
        }
    }

    /// Publishes `text` (a fleet.toml, digest `digest`) as the config in force for the fleet;
    /// returns its version. The same digest as the published one changes nothing (its version
    /// is returned); anything else becomes the next version. Waits for every claim in flight
    /// (PostgreSQL: they hold the row `FOR SHARE`), so later claims count against it.
    ///
    /// Errors: fencing (a host whose epoch is gone publishes nothing), busy database.
    pub fn publish_config(&self, epoch: i64, text: &str, digest: &str, now: Millis) -> Result<i64> {
        match &self.backend {
            Backend::Sqlite(db) => db.publish_config(epoch, text, digest, now),
            Backend::Postgres(db) => db.publish_config(epoch, text, digest, now),
        }
    }

    /// The config in force for the fleet, if one was ever published.
    ///
    /// Errors: the database's.
    pub fn published_config(&self) -> Result<Option<Published>> {
        match &self.backend {
            Backend::Sqlite(db) => db.published_config(),
            Backend::Postgres(db) => db.published_config(),
        }
    }

    /// Keeps the end of run `run`'s log (`tail`, at most [`crate::LOG_TAIL_BYTES`]; `cut` when
    /// the log was longer) for `fleet logs` on other hosts, recorded as the writing epoch's
    /// host's. A run pruned meanwhile gets nothing. Fenced: a forgotten daemon writes nothing.
    ///
    /// Errors: fencing, busy database.
    pub fn store_log_tail(&self, epoch: i64, run: RunId, tail: &[u8], cut: bool) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(db) => db.store_log_tail(epoch, run, tail, cut),
            Backend::Postgres(db) => db.store_log_tail(epoch, run, tail, cut),
        }
    }

    /// The log tail kept for run `run`, if its daemon stored one.
    ///
    /// Errors: the database's.
    pub fn log_tail(&self, run: RunId) -> Result<Option<LogTail>> {
        match &self.backend {
            Backend::Sqlite(db) => db.log_tail(run),
            Backend::Postgres(db) => db.log_tail(run),
        }
    }

    /// For `fleet check`: every way the cap seats disagree with the runs (PostgreSQL: a seat
    /// held by a run that is not active, an active run without its global seat), as (run,
    /// words). Empty on SQLite, whose caps are counts of the run rows themselves.
    ///
    /// Errors: the database's.
    pub fn seat_problems(&self) -> Result<Vec<(RunId, String)>> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(Vec::new()),
            Backend::Postgres(db) => db.seat_problems(),
        }
    }
}
