//! The append-only `events` table: the one way a transition is recorded, and the reader
//! `fleet check` uses.
//!
//! Every write of a run's status, anywhere in the backend, calls [`insert_event`] in the same
//! transaction. Nothing here may update or delete an event.

use rusqlite::{params, Connection};

use super::SqliteStore;
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

/// Appends one event on the caller's connection (inside its transaction).
pub(super) fn insert_event(conn: &Connection, e: &EventRow<'_>) -> Result<()> {
    let (ga, gc, na, nc) = match e.occupancy {
        Some((ga, gc, na, nc)) => (Some(ga), Some(gc), Some(na), nc),
        None => (None, None, None, None),
    };
    conn.prepare_cached(
        "INSERT INTO events (run_id, at, epoch, from_status, to_status, project, namespace, attempt, \
           claim_token, global_active, global_cap, ns_active, ns_cap, detail) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        e.run.id,
        e.at,
        e.epoch,
        e.from.map(|s| s.as_str()),
        e.run.status.as_str(),
        e.run.project,
        e.run.namespace,
        e.run.attempt,
        e.run.claim_token as i64,
        ga,
        gc,
        na,
        nc,
        e.detail
    ])?;
    Ok(())
}

impl SqliteStore {
    /// [`crate::Store::events_after`].
    pub(crate) fn events_after(&self, after: i64) -> Result<Vec<Event>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT seq, run_id, at, epoch, from_status, to_status, project, namespace, attempt, \
               claim_token, global_active, global_cap, ns_active, ns_cap, detail \
             FROM events WHERE seq > ?1 ORDER BY seq",
        )?;
        let rows = stmt.query_map([after], |r| {
            let from: Option<String> = r.get(4)?;
            let to: String = r.get(5)?;
            Ok((
                from,
                to,
                Event {
                    seq: r.get(0)?,
                    run_id: r.get(1)?,
                    at: r.get(2)?,
                    epoch: r.get(3)?,
                    from: None,
                    to: RunStatus::Queued,
                    project: r.get(6)?,
                    namespace: r.get(7)?,
                    attempt: r.get(8)?,
                    claim_token: r.get::<_, i64>(9)? as u64,
                    global_active: r.get(10)?,
                    global_cap: r.get(11)?,
                    namespace_active: r.get(12)?,
                    namespace_cap: r.get(13)?,
                    detail: r.get(14)?,
                },
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (from, to, mut ev) = row?;
            let parse = |s: String| {
                s.parse::<RunStatus>().map_err(|_| StoreError::Corrupt {
                    run: ev.run_id,
                    column: "events.status",
                    value: s,
                })
            };
            ev.from = from.map(parse).transpose()?;
            ev.to = parse(to)?;
            out.push(ev);
        }
        Ok(out)
    }
}
