//! The append-only `events` table, for PostgreSQL: the one way a transition is recorded, and
//! the reader `fleet check` uses.
//!
//! Every write of a run's status calls [`insert_event`] in the same transaction. Nothing here
//! may update or delete an event.

use postgres::Transaction;

use super::PgStore;
use crate::error::Result;
use crate::{Event, Millis, Run, RunStatus, StoreError};

/// One event to append: the run as it is after the change, and what the change was.
pub(super) struct EventRow<'a> {
    /// The run after the change.
    pub(super) run: &'a Run,
    /// Its status before (None for an insert).
    pub(super) from: Option<RunStatus>,
    /// The writer's epoch, when a daemon writes.
    pub(super) epoch: Option<i64>,
    /// When.
    pub(super) at: Millis,
    /// (global active, global cap, namespace active, namespace cap)
    pub(super) occupancy: Option<(u32, u32, u32, Option<u32>)>,
    /// A reason or a pid, in words.
    pub(super) detail: Option<&'a str>,
}

/// Appends one event inside the caller's transaction.
pub(super) fn insert_event(tx: &mut Transaction<'_>, e: &EventRow<'_>) -> Result<()> {
    let (ga, gc, na, nc) = match e.occupancy {
        Some((ga, gc, na, nc)) => (
            Some(i64::from(ga)),
            Some(i64::from(gc)),
            Some(i64::from(na)),
            nc.map(i64::from),
        ),
        None => (None, None, None, None),
    };
    tx.execute(
        "INSERT INTO events (run_id, at, epoch, from_status, to_status, project, namespace, \
           attempt, claim_token, global_active, global_cap, ns_active, ns_cap, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        &[
            &e.run.id,
            &e.at,
            &e.epoch,
            &e.from.map(|s| s.as_str()),
            &e.run.status.as_str(),
            &e.run.project,
            &e.run.namespace,
            &i64::from(e.run.attempt),
            &(e.run.claim_token as i64),
            &ga,
            &gc,
            &na,
            &nc,
            &e.detail,
        ],
    )?;
    Ok(())
}

impl PgStore {
    /// [`crate::Store::events_after`].
    ///
    /// On PostgreSQL, `seq` is taken when the event is inserted, not when it commits: a reader
    /// may see seq 12 committed before seq 11 is. Readers that resume from the highest seq seen
    /// must allow for it (`fleet check` reads every event, and is not affected).
    pub(crate) fn events_after(&self, after: i64) -> Result<Vec<Event>> {
        let mut conn = self.conn()?;
        let rows = conn.query(
            "SELECT seq, run_id, at, epoch, from_status, to_status, project, namespace, attempt, \
               claim_token, global_active, global_cap, ns_active, ns_cap, detail \
             FROM events WHERE seq > $1 ORDER BY seq",
            &[&after],
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let run_id: i64 = r.try_get(1)?;
            let parse = |s: String| {
                s.parse::<RunStatus>().map_err(|_| StoreError::Corrupt {
                    run: run_id,
                    column: "events.status",
                    value: s,
                })
            };
            let narrow = |i: usize| -> Result<Option<u32>> {
                Ok(r.try_get::<_, Option<i64>>(i)?.map(|v| v as u32))
            };
            out.push(Event {
                seq: r.try_get(0)?,
                run_id,
                at: r.try_get(2)?,
                epoch: r.try_get(3)?,
                from: r.try_get::<_, Option<String>>(4)?.map(parse).transpose()?,
                to: parse(r.try_get(5)?)?,
                project: r.try_get(6)?,
                namespace: r.try_get(7)?,
                attempt: r.try_get::<_, i64>(8)? as u32,
                claim_token: r.try_get::<_, i64>(9)? as u64,
                global_active: narrow(10)?,
                global_cap: narrow(11)?,
                namespace_active: narrow(12)?,
                namespace_cap: narrow(13)?,
                detail: r.try_get(14)?,
            });
        }
        Ok(out)
    }
}
