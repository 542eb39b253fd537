//! The claim: `queued → starting` as one guarded `UPDATE … WHERE id = ? AND status = 'queued'
//! RETURNING …` per run, all of an EVAL's claims in one transaction.
//!
//! It must never let a run be handed out twice: the guard makes a second claim of one run match
//! no row, and the commit happens before the caller spawns anything. It must never exceed the
//! caps a request carries either: a claim whose global or namespace cap is full is left out. It
//! must never claim for a stale epoch either (checked first, in the same transaction).
//!
//! Seats: each active run of a project holds a distinct seat number below the project's
//! `max_parallel`, under the unique index `runs_one_active_per_project (project, seat)`. The
//! claim picks the lowest free seat inside its transaction; with none free it claims nothing,
//! and a seat taken twice (a bug anywhere) is refused by the index. Paused projects and
//! namespaces are claimed nothing, read in the same transaction.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::daemon::check_epoch;
use super::eval::occupancy;
use super::events::{insert_event, EventRow};
use super::paused::held_by;
use super::runs::{run_from_row, RUN_COLUMNS};
use super::{is_constraint_violation, is_unique_violation, is_unreadable_value, SqliteStore};
use crate::decide::claim::{caps, lowest_free_seat, stale_config, CapKind};
use crate::error::Result;
use crate::{ClaimRefusal, ClaimRequest, Claimed, Millis, RunStatus, StoreError};

impl SqliteStore {
    /// Claims runs in one `BEGIN IMMEDIATE` transaction, committed before this returns. A run
    /// no longer queued matches no row and is left out; so is one whose project or namespace is
    /// paused, or whose project has no free seat below `max_parallel`; a claim refused by the
    /// unique index `runs_one_active_per_project` is logged and left out. Each claim's event records the
    /// occupancy counted inside the transaction, right after the claim. Each claim runs under a
    /// savepoint: one whose write or event the database refuses (a constraint, another
    /// program's trigger) is undone alone and appended to `refused`, its run left queued.
    ///
    /// Errors: a stale epoch or config, any other failure of the database, and a trigger that
    /// ended the whole transaction (`RAISE(ROLLBACK)`): then nothing of this call was kept.
    pub(crate) fn claim(
        &self,
        epoch: i64,
        requests: &[ClaimRequest],
        now: Millis,
        refused: &mut Vec<ClaimRefusal>,
    ) -> Result<Vec<Claimed>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let host = check_epoch(&tx, epoch)?;
        if let Some(ours) = requests.iter().find_map(|r| r.config_version) {
            let published: i64 = tx
                .query_row(
                    "SELECT version FROM published_config WHERE id = 1",
                    [],
                    |r| r.get(0),
                )
                .optional()?
                .unwrap_or(0);
            if let Some(stale) = stale_config(Some(ours), published) {
                return Err(stale);
            }
        }
        let mut out = Vec::with_capacity(requests.len());
        {
            // The token is random, not a counter: should a run id ever repeat (a run queued on a
            // database restored from a backup before a daemon renumbered new runs past the run
            // files), files left by an old run of that id must not pass for this claim's.
            let sql = format!(
                "UPDATE runs SET status = 'starting', namespace = ?2, claim_token = ((random() & 9223372036854775807) | 1), \
                   epoch = ?3, started_at = ?4, finished_at = NULL, pid = NULL, exit_code = NULL, signal = NULL, \
                   seat = ?5, host = ?6 \
                 WHERE id = ?1 AND status = 'queued' RETURNING {RUN_COLUMNS}"
            );
            let mut claim = tx.prepare_cached(&sql)?;
            for req in requests {
                let Some(project) = queued_project(&tx, req.run_id)? else {
                    continue;
                };
                if let Some(kind) = held_by(&tx, &project, &req.namespace)? {
                    tracing::debug!(run = req.run_id, held_by = %kind, "claim skipped: paused");
                    continue;
                }
                // The caps are the database's to enforce, not only the packer's: inside this
                // BEGIN IMMEDIATE transaction no other connection writes, so the count and the
                // claim below cannot race (PostgreSQL, where they could, uses seats instead).
                let (g, n) = occupancy(&tx, &req.namespace)?;
                let on_host = match req.host_cap {
                    Some(_) => active_on_host(&tx, &host)?,
                    None => 0,
                };
                let full = caps(req, &host).iter().any(|c| {
                    let active = match c.kind {
                        CapKind::Global => g,
                        CapKind::Namespace => n,
                        CapKind::Host => on_host,
                    };
                    active >= c.cap
                });
                if full {
                    tracing::info!(run = req.run_id, namespace = %req.namespace,
                        "claim refused: its cap is full");
                    continue;
                }
                let Some(seat) = free_seat(&tx, &project, req.max_parallel)? else {
                    tracing::debug!(
                        run = req.run_id,
                        max_parallel = req.max_parallel,
                        "claim skipped: every seat of its project is taken"
                    );
                    continue;
                };
                // Each claim under a savepoint of its own: a refusal after the claim's write
                // (its event's insert, refused by a trigger on `events`) rolls back that claim
                // alone, as a refusal of the write itself does.
                tx.prepare_cached("SAVEPOINT claim")?.execute([])?;
                let row = claim
                    .query_row(
                        params![req.run_id, req.namespace, epoch, now, seat, host],
                        run_from_row,
                    )
                    .optional();
                let run = match row {
                    Ok(Some(Ok(run))) => run,
                    // A row another program wrote that fleet cannot read (arguments that are
                    // not JSON, a number out of range): this claim alone is undone, its run
                    // held back; an error would stop every claim of every EVAL.
                    Ok(Some(Err(e))) => {
                        refuse_unreadable(&tx, refused, req.run_id, &e)?;
                        continue;
                    }
                    Err(e) if is_unreadable_value(&e) => {
                        refuse_unreadable(&tx, refused, req.run_id, &e)?;
                        continue;
                    }
                    // Queued a moment ago in this very transaction (`queued_project`), so a
                    // write that changed no row was dropped by a trigger (`RAISE(IGNORE)`).
                    Ok(None) => {
                        release_claim(&tx)?;
                        refused.push(ClaimRefusal {
                            run_id: req.run_id,
                            reason: "a trigger on runs dropped the claim's write".into(),
                        });
                        continue;
                    }
                    Err(e) if is_constraint_violation(&e) => {
                        if !roll_back_claim(&tx)? {
                            return Err(e.into());
                        }
                        if is_unique_violation(&e) {
                            tracing::warn!(
                                run = req.run_id,
                                seat,
                                "claim refused: that seat of its project is already taken"
                            );
                        } else {
                            // Another constraint, or a trigger another program put on `runs`:
                            // the run stays queued; the caller says so and decides when to
                            // ask again.
                            refused.push(ClaimRefusal {
                                run_id: req.run_id,
                                reason: StoreError::from(e).to_string(),
                            });
                        }
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let recorded = occupancy(&tx, &req.namespace).and_then(|(g, n)| {
                    insert_event(
                        &tx,
                        &EventRow {
                            run: &run,
                            from: Some(RunStatus::Queued),
                            epoch: Some(epoch),
                            at: now,
                            occupancy: Some((g, req.global_cap, n, req.namespace_cap)),
                            detail: None,
                        },
                    )
                });
                match recorded {
                    Ok(()) => release_claim(&tx)?,
                    // A claim with no event would be one `fleet check` cannot account for, and
                    // failing the whole transaction would stop every claim of every EVAL: this
                    // claim alone is undone, and its run stays queued, held back by the caller.
                    Err(e) if e.is_refused_row() => {
                        if !roll_back_claim(&tx)? {
                            return Err(e);
                        }
                        refused.push(ClaimRefusal {
                            run_id: req.run_id,
                            reason: format!("its event could not be recorded: {e}"),
                        });
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                out.push(Claimed { run });
            }
        }
        tx.commit()?;
        Ok(out)
    }
}

/// Undoes the current claim of run `id`, whose row could not be read (`what`), and reports it
/// as refused. A value that cannot be read ends no transaction, so the undo always happens.
fn refuse_unreadable(
    conn: &Connection,
    refused: &mut Vec<ClaimRefusal>,
    id: i64,
    what: &dyn std::fmt::Display,
) -> Result<()> {
    roll_back_claim(conn)?;
    refused.push(ClaimRefusal {
        run_id: id,
        reason: format!("its row cannot be read: {what}"),
    });
    Ok(())
}

/// Keeps what the current claim wrote: releases its savepoint (see [`SqliteStore::claim`]).
fn release_claim(conn: &Connection) -> Result<()> {
    conn.prepare_cached("RELEASE claim")?.execute([])?;
    Ok(())
}

/// Undoes what the current claim wrote, and releases its savepoint; false, undoing nothing,
/// when a trigger's `RAISE(ROLLBACK)` has already ended the whole transaction. Then nothing of
/// it was kept, no savepoint is left to go back to, and every statement after would commit on
/// its own: the caller fails the claim as a whole instead of going on.
fn roll_back_claim(conn: &Connection) -> Result<bool> {
    if conn.is_autocommit() {
        return Ok(false);
    }
    conn.prepare_cached("ROLLBACK TO claim")?.execute([])?;
    release_claim(conn)?;
    Ok(true)
}

/// Active runs claimed by `host`, counted on the claim's transaction (its own capacity).
fn active_on_host(conn: &Connection, host: &str) -> Result<u32> {
    Ok(conn
        .prepare_cached(
            "SELECT COUNT(*) FROM runs WHERE status IN ('starting','running') AND host = ?1",
        )?
        .query_row([host], |r| r.get(0))?)
}

/// The project of run `id` if it is still queued, read on the claim's transaction.
fn queued_project(conn: &Connection, id: i64) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT project FROM runs WHERE id = ?1 AND status = 'queued'")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

/// The lowest seat of `project` below `max_parallel` that no active run holds, read on the
/// claim's transaction; `None` when all are taken (or `max_parallel` is 0).
fn free_seat(conn: &Connection, project: &str, max_parallel: u32) -> Result<Option<u32>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seat FROM runs WHERE project = ?1 AND status IN ('starting','running') \
         ORDER BY seat",
    )?;
    let taken = stmt
        .query_map([project], |r| r.get::<_, u32>(0))?
        .collect::<rusqlite::Result<Vec<u32>>>()?;
    // `taken` is sorted, as `lowest_free_seat` needs.
    Ok(lowest_free_seat(taken, max_parallel))
}
