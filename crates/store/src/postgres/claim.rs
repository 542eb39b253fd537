//! The claim, for PostgreSQL: `queued → starting` as one guarded `UPDATE … WHERE id = $1 AND
//! status = 'queued' RETURNING …` per run, on a free seat of its project (below its
//! `max_parallel`, under the unique index), and the run's cap seats taken in the same
//! transaction, all of an EVAL's claims in one transaction. Paused projects and namespaces are
//! claimed nothing, read in the same transaction.
//!
//! It must never let a run be handed out twice (the guard: of two transactions claiming one run
//! at once, the second waits for the first's row lock, then matches nothing), never let a cap be
//! exceeded by claims racing on several connections or hosts (the seats: see [`take_seat`]), and
//! never claim for a stale epoch (checked first, in the same transaction).

use postgres::Transaction;

use super::daemon::check_epoch;
use super::eval::occupancy;
use super::events::{insert_event, EventRow};
use super::paused::held_by;
use super::runs::{run_from_row, RUN_COLUMNS};
use super::{is_unique_violation, PgStore};
use crate::decide::claim::{caps, lowest_free_seat, stale_config, Cap};
use crate::error::Result;
use crate::{ClaimRefusal, ClaimRequest, Claimed, Millis, RunId, RunStatus, StoreError};

impl PgStore {
    /// Claims runs in one transaction, committed before this returns. Each claim runs under a
    /// savepoint: a run no longer queued, a run whose project already has an active run (the
    /// unique index), and a run for which a cap has no seat left are each rolled back alone and
    /// left out, queued; so is one whose write, seats or event the database refuses (a
    /// constraint, another program's trigger, seats the run still holds from an earlier claim),
    /// appended to `refused`. Each claim's event records the occupancy counted inside the transaction.
    pub(crate) fn claim(
        &self,
        epoch: i64,
        requests: &[ClaimRequest],
        now: Millis,
        refused: &mut Vec<ClaimRefusal>,
    ) -> Result<Vec<Claimed>> {
        let mut conn = self.conn()?;
        // The claiming host's name names its seats; read (and fenced) before the seats are
        // made, outside the claim's transaction, then checked again inside it.
        let host = {
            let mut tx = conn.transaction()?;
            let host = check_epoch(&mut tx, epoch)?;
            tx.commit()?;
            host
        };
        // Each cap with how many of these claims count against it: its seats are made as far
        // as they may be needed, not to the cap.
        let mut all_caps: Vec<Cap<'_>> = requests.iter().flat_map(|r| caps(r, &host)).collect();
        all_caps.sort_unstable();
        for group in all_caps.chunk_by(|a, b| a == b) {
            let c = group[0];
            provide_seats(&mut *conn, c.kind.as_str(), c.name, c.cap, group.len())?;
        }
        let mut tx = conn.transaction()?;
        // Checked again in the claim's own transaction: the seats were made outside it.
        check_epoch(&mut tx, epoch)?;
        check_published(&mut tx, requests)?;
        // The runs this transaction may claim: those still queued that no other transaction is
        // claiming right now. Locked here, all at once and without waiting (`SKIP LOCKED`), so
        // two claim batches naming the same runs in different orders never deadlock; a run
        // another transaction holds is left to it (it claims it, or it stays queued for later).
        let ids: Vec<RunId> = requests.iter().map(|r| r.run_id).collect();
        let free: std::collections::HashMap<RunId, String> = tx
            .query(
                "SELECT id, project FROM runs WHERE id = ANY($1) AND status = 'queued' \
                 FOR UPDATE SKIP LOCKED",
                &[&ids],
            )?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_>>()?;
        // The queue-head locks of the projects claimed from (see `queue_heads` in `schema.sql`),
        // taken now, in name order, instead of one by one by the trigger in request order:
        // two claim batches over the same projects then never deadlock on them. The key is the
        // trigger's own. `unnest` yields the array in its order.
        let mut projects: Vec<&String> = free.values().collect();
        projects.sort_unstable();
        projects.dedup();
        tx.execute(
            "SELECT count(pg_advisory_xact_lock(hashtextextended('fleet queue head ' || p, 0))) \
             FROM unnest($1::text[]) AS p",
            &[&projects],
        )?;
        // The token is random (63 bits, never 0), as on SQLite: should a run id ever repeat
        // (see there), files left by an old run of that id must not pass for this claim's.
        let sql = format!(
            "UPDATE runs SET status = 'starting', namespace = $2, \
               claim_token = ((('x' || substr(md5(gen_random_uuid()::text), 1, 16))::bit(64)::bigint \
                               & 9223372036854775807) | 1), \
               epoch = $3, started_at = $4, finished_at = NULL, pid = NULL, exit_code = NULL, \
               signal = NULL, seat = $5, host = $6 \
             WHERE id = $1 AND status = 'queued' RETURNING {RUN_COLUMNS}"
        );
        let mut out = Vec::with_capacity(requests.len());
        for req in requests {
            let Some(project) = free.get(&req.run_id) else {
                continue;
            };
            if let Some(kind) = held_by(&mut tx, project, &req.namespace)? {
                tracing::debug!(run = req.run_id, held_by = %kind, "claim skipped: paused");
                continue;
            }
            let Some(seat) = free_project_seat(&mut tx, project, req.max_parallel)? else {
                tracing::debug!(
                    run = req.run_id,
                    max_parallel = req.max_parallel,
                    "claim skipped: every seat of its project is taken"
                );
                continue;
            };
            // Dropping the savepoint unreleased rolls this one claim back.
            let mut sp = tx.savepoint("claim")?;
            let params: [&(dyn postgres::types::ToSql + Sync); 6] = [
                &req.run_id,
                &req.namespace,
                &epoch,
                &now,
                &i64::from(seat),
                &host,
            ];
            let run = match sp.query_opt(&sql, &params) {
                Ok(Some(row)) => match run_from_row(&row) {
                    Ok(run) => run,
                    // A row another program wrote that fleet cannot read (arguments that are
                    // not JSON, a number out of range): this claim alone is rolled back (the
                    // savepoint), its run held back; an error would stop every claim.
                    Err(unreadable) => {
                        refused.push(ClaimRefusal {
                            run_id: req.run_id,
                            reason: format!("its row cannot be read: {unreadable}"),
                        });
                        continue;
                    }
                },
                // Locked as queued by this transaction (`FOR UPDATE` above), so a write that
                // changed no row was dropped by a trigger (one that returns NULL).
                Ok(None) => {
                    refused.push(ClaimRefusal {
                        run_id: req.run_id,
                        reason: "a trigger on runs dropped the claim's write".into(),
                    });
                    continue;
                }
                // Another transaction took the same seat of the project meanwhile (its claim
                // was not visible to the read above): the unique index refuses the second.
                Err(e) if is_unique_violation(&e) => {
                    tracing::warn!(
                        run = req.run_id,
                        seat,
                        "claim refused: that seat of its project is already taken"
                    );
                    continue;
                }
                // Another constraint, or a trigger another program put on `runs`: this claim
                // alone is rolled back (the savepoint), the run stays queued and is tried again
                // at the next EVAL, and the other claims go on.
                Err(e) if super::is_refused(&e) => {
                    // Through StoreError: its words carry the database's message and SQLSTATE,
                    // where the driver's own say only "db error".
                    refused.push(ClaimRefusal {
                        run_id: req.run_id,
                        reason: StoreError::from(e).to_string(),
                    });
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match seat_and_record(&mut sp, req, &host, &run, epoch, now) {
                Ok(true) => {}
                Ok(false) => continue,
                // A refusal after the claim's write: a seat the run holds already (its row was
                // written back to `queued` by another program while a claim of it was active:
                // those seats stay held until that claim ends, and the index on seats refuses a
                // second set), or its event refused by a trigger on `events`. This claim alone
                // is rolled back (the savepoint), its run stays queued and is held back by the
                // caller; failing the transaction would stop every claim of every EVAL.
                Err(e) if e.is_refused_row() => {
                    refused.push(ClaimRefusal {
                        run_id: req.run_id,
                        reason: refusal_after_write(&e),
                    });
                    continue;
                }
                Err(e) => return Err(e),
            }
            sp.commit()?;
            out.push(Claimed { run });
        }
        tx.commit()?;
        Ok(out)
    }
}

/// Takes `run`'s seat of every cap of `req` and records the claim's event, on the claim's
/// savepoint; false when a cap has no seat left (the caller leaves the run queued).
fn seat_and_record(
    sp: &mut Transaction<'_>,
    req: &ClaimRequest,
    host: &str,
    run: &crate::Run,
    epoch: i64,
    now: Millis,
) -> Result<bool> {
    for c in caps(req, host) {
        if !take_seat(sp, c.kind.as_str(), c.name, c.cap, run.id)? {
            tracing::info!(run = run.id, namespace = %req.namespace,
                "claim refused: no {} seat left", c.kind.as_str());
            return Ok(false);
        }
    }
    let (g, n) = occupancy(sp, &req.namespace)?;
    insert_event(
        sp,
        &EventRow {
            run,
            from: Some(RunStatus::Queued),
            epoch: Some(epoch),
            at: now,
            occupancy: Some((g, req.global_cap, n, req.namespace_cap)),
            detail: None,
        },
    )?;
    Ok(true)
}

/// The reason given for a claim refused after its write ([`seat_and_record`]): the database's
/// words, and what a refused second set of seats means.
fn refusal_after_write(e: &StoreError) -> String {
    if super::broken_constraint(e) == Some("cap_seats_by_run") {
        format!(
            "the run still holds the seats of an earlier claim (its row was set back to queued              while that claim was active, by another program): {e}"
        )
    } else {
        format!("the claim's seats or event could not be recorded: {e}")
    }
}

/// Refuses the claim with [`crate::StoreError::StaleConfig`] when its requests were packed
/// with another config version than the published one. The row is read `FOR SHARE` and held
/// to commit: a publish (which updates it) waits for this claim, and claims after it see it.
fn check_published(tx: &mut Transaction<'_>, requests: &[ClaimRequest]) -> Result<()> {
    let Some(ours) = requests.iter().find_map(|r| r.config_version) else {
        return Ok(());
    };
    let published: i64 = tx
        .query_opt(
            "SELECT version FROM published_config WHERE id = 1 FOR SHARE",
            &[],
        )?
        .map(|r| r.try_get(0))
        .transpose()?
        .unwrap_or(0);
    match stale_config(Some(ours), published) {
        Some(stale) => Err(stale),
        None => Ok(()),
    }
}

/// The lowest seat of `project` below `max_parallel` that no committed active run holds, read in
/// the claim's transaction; `None` when all are taken (or `max_parallel` is 0). A seat taken by
/// a claim not yet committed looks free here: the unique index `runs_one_active_per_project`
/// then refuses the second of the two claims. Reads the project's active runs only, so that it
/// costs what they are, not what `max_parallel` is.
fn free_project_seat(
    tx: &mut Transaction<'_>,
    project: &str,
    max_parallel: u32,
) -> Result<Option<u32>> {
    let taken = tx
        .query(
            "SELECT seat FROM runs WHERE project = $1 AND status IN ('starting','running') \
             ORDER BY seat",
            &[&project],
        )?
        .iter()
        .map(|r| Ok(u32::try_from(r.try_get::<_, i64>(0)?).unwrap_or(u32::MAX)))
        .collect::<Result<Vec<u32>>>()?;
    // `taken` is sorted, as `lowest_free_seat` needs.
    Ok(lowest_free_seat(taken, max_parallel))
}

/// Makes the seat rows of cap (`kind`, `name`) that `wanted` more claims may need exist (free) if
/// they do not yet: seats `0 .. n-1`, `n` being twice the seats held now and `wanted`, plus
/// [`SEAT_HEADROOM`], at most `cap`.
/// In a statement of its own, committed before the claim's transaction begins: making them
/// inside the claim would have claims wait on each other's inserts. The rows of a cap are made
/// in seat order, so when seat `n-1` exists all below it do, and two processes making them at
/// once never deadlock.
///
/// Made as needed, not to the cap: a cap of a million costs the rows the runs active under it
/// at once have needed, not a million rows made by the first claim. The margin is for the
/// claims of other hosts (and processes) made at the same time, which count seats held a moment
/// earlier: should they still take every row, the cap looks full for a moment, as when a seat
/// is locked ([`take_seat`]); the run stays queued, and the next EVAL makes more.
pub(super) fn provide_seats(
    conn: &mut impl postgres::GenericClient,
    kind: &str,
    name: &str,
    cap: u32,
    wanted: usize,
) -> Result<()> {
    let wanted = i64::try_from(wanted).unwrap_or(i64::MAX);
    conn.execute(
        "WITH need AS ( \
           SELECT LEAST($3::bigint, 2 * ($4::bigint + (SELECT count(*) FROM cap_seats \
                    WHERE kind = $1 AND name = $2 AND run_id IS NOT NULL)) + $5::bigint) AS n) \
         INSERT INTO cap_seats (kind, name, seat) \
         SELECT $1, $2, s FROM need, generate_series(0, need.n - 1) AS s \
         WHERE NOT EXISTS (SELECT 1 FROM cap_seats WHERE kind = $1 AND name = $2 \
                             AND seat = need.n - 1) \
         ORDER BY s ON CONFLICT DO NOTHING",
        &[&kind, &name, &i64::from(cap), &wanted, &SEAT_HEADROOM],
    )?;
    Ok(())
}

/// The seat rows of a cap made beyond twice what its runs hold and want ([`provide_seats`]).
const SEAT_HEADROOM: i64 = 64;

/// Takes for `run` the lowest free seat `0 .. cap-1` of cap (`kind`, `name`), in the caller's
/// transaction; false when none is free (the cap is full, or the free seats are not made yet:
/// [`provide_seats`]).
///
/// Why it cannot be exceeded: a seat is a row, taken under its row lock (`FOR UPDATE`). A seat
/// another transaction is taking (or freeing) is locked, and skipped (`SKIP LOCKED`) rather than
/// waited for, so claims never queue or deadlock on seats; a seat taken by a transaction that
/// has committed since this statement began is re-read, found taken, and skipped too. So no
/// two transactions ever hold one seat, and the seats held never outnumber the cap.
///
/// A seat skipped because it was locked may make a cap look full for a moment: the claim then
/// leaves the run queued for a later EVAL (never the other way round).
///
/// A cap lowered while runs hold seats at or above it: no seat of that cap is taken at all
/// until those runs have ended. Counting the seats held is not enough there: two claims racing
/// (neither sees the other's uncommitted seat) would both see room and take two distinct free
/// seats below the new cap, reaching the old cap. With no seat >= cap held, every seat held is
/// below the cap and distinct, so the seats held never outnumber it, whatever races.
pub(super) fn take_seat(
    tx: &mut Transaction<'_>,
    kind: &str,
    name: &str,
    cap: u32,
    run: RunId,
) -> Result<bool> {
    let taken = tx.query_opt(
        "UPDATE cap_seats SET run_id = $4 WHERE (kind, name, seat) = ( \
           SELECT kind, name, seat FROM cap_seats \
           WHERE kind = $1 AND name = $2 AND seat < $3 AND run_id IS NULL \
             AND (SELECT count(*) FROM cap_seats h \
                  WHERE h.kind = $1 AND h.name = $2 AND h.run_id IS NOT NULL) < $3 \
             AND NOT EXISTS (SELECT 1 FROM cap_seats o \
                  WHERE o.kind = $1 AND o.name = $2 AND o.seat >= $3 AND o.run_id IS NOT NULL) \
           ORDER BY seat LIMIT 1 FOR UPDATE SKIP LOCKED) \
         RETURNING seat",
        &[&kind, &name, &i64::from(cap), &run],
    )?;
    Ok(taken.is_some())
}

/// Frees every seat `run` holds, in the caller's transaction (the one that ends the run, or
/// puts it back in the queue). Called only where the run leaves `starting`/`running`, under its
/// row lock, so a run's seats are freed exactly once.
pub(super) fn free_seats(tx: &mut Transaction<'_>, run: RunId) -> Result<()> {
    tx.execute(
        "UPDATE cap_seats SET run_id = NULL WHERE run_id = $1",
        &[&run],
    )?;
    Ok(())
}
