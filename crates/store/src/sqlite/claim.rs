//! The claim: `queued → starting` as one guarded `UPDATE … WHERE id = ? AND status = 'queued'
//! RETURNING …` per run, all of an EVAL's claims in one transaction.
//!
//! It must never let a run be handed out twice: the guard makes a second claim of one run match
//! no row, and the commit happens before the caller spawns anything. It must never exceed the
//! caps a request carries either: a claim whose global or namespace cap is full is left out. It must never claim for a
//! stale epoch either (checked first, in the same transaction).

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::daemon::check_epoch;
use super::eval::occupancy;
use super::events::{insert_event, EventRow};
use super::runs::{run_from_row, RUN_COLUMNS};
use super::{is_constraint_violation, SqliteStore};
use crate::error::Result;
use crate::{ClaimRequest, Claimed, Millis, RunStatus};

impl SqliteStore {
    /// Claims runs in one `BEGIN IMMEDIATE` transaction, committed before this returns. A run
    /// no longer queued matches no row and is left out; a claim refused by the unique index
    /// `runs_one_active_per_project` is logged and left out. Each claim's event records the
    /// occupancy counted inside the transaction, right after the claim.
    pub(crate) fn claim(
        &self,
        epoch: i64,
        requests: &[ClaimRequest],
        now: Millis,
    ) -> Result<Vec<Claimed>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        check_epoch(&tx, epoch)?;
        let mut out = Vec::with_capacity(requests.len());
        {
            // The token is random, not a counter: after a restore from a backup, run ids
            // repeat, and files left by an old run of the same id must not pass for this claim's.
            let sql = format!(
                "UPDATE runs SET status = 'starting', namespace = ?2, claim_token = ((random() & 9223372036854775807) | 1), \
                   epoch = ?3, started_at = ?4, finished_at = NULL, pid = NULL, exit_code = NULL, signal = NULL \
                 WHERE id = ?1 AND status = 'queued' RETURNING {RUN_COLUMNS}"
            );
            let mut claim = tx.prepare_cached(&sql)?;
            for req in requests {
                // The caps are the database's to enforce, not only the packer's: inside this
                // BEGIN IMMEDIATE transaction no other connection writes, so the count and the
                // claim below cannot race (PostgreSQL, where they could, uses seats instead).
                let (g, n) = occupancy(&tx, &req.namespace)?;
                if g >= req.global_cap || req.namespace_cap.is_some_and(|cap| n >= cap) {
                    tracing::info!(run = req.run_id, namespace = %req.namespace,
                        "claim refused: its cap is full");
                    continue;
                }
                let row = claim
                    .query_row(params![req.run_id, req.namespace, epoch, now], run_from_row)
                    .optional();
                let run = match row {
                    Ok(Some(run)) => run?,
                    Ok(None) => continue,
                    Err(e) if is_constraint_violation(&e) => {
                        tracing::warn!(
                            run = req.run_id,
                            "claim refused: its project already has an active run"
                        );
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let (g, n) = occupancy(&tx, &req.namespace)?;
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
                )?;
                out.push(Claimed { run });
            }
        }
        tx.commit()?;
        Ok(out)
    }
}
