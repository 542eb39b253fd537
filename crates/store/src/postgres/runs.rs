//! Run commands and the run row mapping, for PostgreSQL: enqueue, read one run or a filtered
//! list, cancel one run (or request its stop), or cancel a given list of queued runs.
//!
//! It owns `RUN_COLUMNS` and the one mapping from a `runs` row to [`Run`]. Every write here
//! appends its event in the same transaction; none may change an active run's status.

use postgres::{GenericClient, Row, Transaction};

use super::events::{insert_event, EventRow};
use super::PgStore;
use crate::decide::cancel::{cancel_run, CancelWrites};
use crate::decide::run_columns::{decode_columns, encode_args, encode_env, Decoded, TextColumns};
use crate::error::Result;
use crate::{
    CancelOutcome, Millis, NewRun, Run, RunFilter, RunId, RunRows, RunStatus, StoreError,
    UnreadableRun,
};

pub(super) use crate::decide::run_columns::RUN_COLUMNS;

/// An optional integer column narrowed to `i32` (pid, exit code, signal); [`StoreError::Corrupt`]
/// when it does not fit.
fn small(row: &Row, id: RunId, i: usize, column: &'static str) -> Result<Option<i32>> {
    row.try_get::<_, Option<i64>>(i)?
        .map(|v| fits(id, column, v))
        .transpose()
}

/// `value` of `column` as the narrower type fleet keeps it in; [`StoreError::Corrupt`] when it
/// does not fit (a number another program wrote), never a value cut to fit.
fn fits<T: TryFrom<i64>>(id: RunId, column: &'static str, value: i64) -> Result<T> {
    T::try_from(value).map_err(|_| StoreError::Corrupt {
        run: id,
        column,
        value: value.to_string(),
    })
}

/// Maps a row selected as [`RUN_COLUMNS`] to a [`Run`]. Errors: [`StoreError::Corrupt`] for a
/// status, trigger, args or env this version cannot read; the driver's for a column of an
/// unexpected type.
pub(super) fn run_from_row(row: &Row) -> Result<Run> {
    let id: RunId = row.try_get(0)?;
    let text = TextColumns {
        status: row.try_get(3)?,
        trigger: row.try_get(5)?,
        args: row.try_get(20)?,
        env: row.try_get(21)?,
    };
    let Decoded {
        status,
        trigger,
        args,
        env,
    } = decode_columns(id, text)?;
    Ok(Run {
        id,
        project: row.try_get(1)?,
        namespace: row.try_get(2)?,
        status,
        attempt: fits(id, "attempt", row.try_get::<_, i64>(4)?)?,
        trigger,
        occurrence: row.try_get(6)?,
        priority: row.try_get(7)?,
        not_before: row.try_get(8)?,
        enqueued_at: row.try_get(9)?,
        started_at: row.try_get(10)?,
        finished_at: row.try_get(11)?,
        pid: small(row, id, 12, "pid")?,
        exit_code: small(row, id, 13, "exit_code")?,
        signal: small(row, id, 14, "signal")?,
        reason: row.try_get(15)?,
        cancel_requested: row.try_get(16)?,
        claim_token: row.try_get::<_, i64>(17)? as u64,
        epoch: row.try_get(18)?,
        retry_of: row.try_get(19)?,
        args,
        env,
        rerun_of: row.try_get(22)?,
        hook_of: row.try_get(23)?,
        seat: fits(id, "seat", row.try_get::<_, i64>(24)?)?,
        host: row.try_get(25)?,
    })
}

/// Rows selected as [`RUN_COLUMNS`], sorted into those [`run_from_row`] reads and those
/// holding a value it cannot ([`StoreError::Corrupt`]): what names such a row, and counts its
/// seat, is read on its own (see [`crate::UnreadableRun`]).
///
/// Errors: the driver's, for anything but a row's own unreadable value.
pub(super) fn collect_rows(rows: Vec<Row>) -> Result<RunRows> {
    let mut out = RunRows::default();
    for row in &rows {
        match run_from_row(row) {
            Ok(run) => out.runs.push(run),
            Err(e @ StoreError::Corrupt { .. }) => out.unreadable.push(UnreadableRun {
                id: row.try_get(0)?,
                project: row.try_get(1)?,
                namespace: row.try_get(2)?,
                host: row.try_get(25)?,
                // PostgreSQL's text is always UTF-8.
                seat_known: true,
                claim_token: row.try_get::<_, i64>(17)? as u64,
                error: e.to_string(),
            }),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Maps every row through [`run_from_row`].
pub(super) fn collect_runs(rows: Vec<Row>) -> Result<Vec<Run>> {
    rows.iter().map(run_from_row).collect()
}

impl PgStore {
    /// [`crate::Store::enqueue`]: the insert and its event in one transaction.
    pub(crate) fn enqueue(&self, new: &NewRun, now: Millis) -> Result<RunId> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        let id = insert_run(&mut tx, new, 1, None, now)?;
        tx.commit()?;
        Ok(id)
    }

    /// [`crate::Store::get_run`].
    pub(crate) fn get_run(&self, id: RunId) -> Result<Run> {
        let mut conn = self.conn()?;
        get_run(&mut *conn, id, false)?.ok_or(StoreError::UnknownRun(id))
    }

    /// [`crate::Store::list_rows`]: one statement for every combination of filters, an absent
    /// one NULL (matching all); no limit is `LIMIT NULL`.
    pub(crate) fn list_rows(&self, filter: &RunFilter) -> Result<RunRows> {
        let mut conn = self.conn()?;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE ($1::text IS NULL OR project = $1::text) \
             AND ($2::text IS NULL OR status = $2::text) \
             AND ($4::text[] IS NULL OR status = ANY($4::text[])) \
             AND ($5::text IS NULL OR namespace = $5::text) \
             AND ($6::text IS NULL OR trigger = $6::text) \
             AND ($7::bigint IS NULL OR enqueued_at >= $7::bigint) \
             AND ($8::bigint IS NULL OR enqueued_at <= $8::bigint) \
             ORDER BY id DESC LIMIT $3::bigint"
        );
        let limit = filter.limit.map(i64::from);
        let statuses: Option<Vec<&str>> = (!filter.statuses.is_empty())
            .then(|| filter.statuses.iter().map(|s| s.as_str()).collect());
        let rows = conn.query(
            &sql,
            &[
                &filter.project,
                &filter.status.map(|s| s.as_str()),
                &limit,
                &statuses,
                &filter.namespace,
                &filter.trigger.map(|t| t.as_str()),
                &filter.since,
                &filter.until,
            ],
        )?;
        collect_rows(rows)
    }

    /// [`crate::Store::request_cancel`]: the run is read `FOR UPDATE` and written in one
    /// transaction, so a claim or an end cannot slip in between.
    pub(crate) fn request_cancel(
        &self,
        id: RunId,
        reason: &str,
        now: Millis,
    ) -> Result<CancelOutcome> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        let run = get_run(&mut tx, id, true)?.ok_or(StoreError::UnknownRun(id))?;
        let outcome = cancel_run(&mut RunTx(&mut tx), id, run.status, reason, now)?
            .unwrap_or(CancelOutcome::Cancelled);
        tx.commit()?;
        Ok(outcome)
    }

    /// [`crate::Store::cancel_queued_runs`]: one guarded update per run, each with its event,
    /// in one transaction.
    pub(crate) fn cancel_queued_runs(
        &self,
        ids: &[RunId],
        reason: &str,
        now: Millis,
    ) -> Result<Vec<RunId>> {
        let mut conn = self.conn()?;
        let mut tx = conn.transaction()?;
        let mut cancelled = Vec::new();
        for &id in ids {
            if cancel_if_queued(&mut tx, id, reason, now)? {
                cancelled.push(id);
            }
        }
        tx.commit()?;
        Ok(cancelled)
    }
}

/// The caller's transaction, for the writes of the neutral decisions ([`crate::decide`]).
pub(super) struct RunTx<'a, 't>(pub(super) &'a mut Transaction<'t>);

impl CancelWrites for RunTx<'_, '_> {
    fn cancel_if_queued(&mut self, id: RunId, reason: &str, now: Millis) -> Result<bool> {
        cancel_if_queued(self.0, id, reason, now)
    }

    fn request_stop(&mut self, id: RunId, reason: &str, now: Millis) -> Result<()> {
        request_stop(self.0, id, reason, now)
    }
}

/// Ends run `id` `cancelled` with `reason` if it is still `queued`, and appends the event, in
/// the caller's transaction. Returns whether it did. The guarded update is the check: of two
/// transactions at once, the second re-reads the row after the first commits and matches nothing.
pub(super) fn cancel_if_queued(
    tx: &mut Transaction<'_>,
    id: RunId,
    reason: &str,
    now: Millis,
) -> Result<bool> {
    let sql = format!(
        "UPDATE runs SET status = 'cancelled', finished_at = $2, reason = $3 \
         WHERE id = $1 AND status = 'queued' RETURNING {RUN_COLUMNS}"
    );
    let Some(row) = tx.query_opt(&sql, &[&id, &now, &reason])? else {
        return Ok(false);
    };
    let run = run_from_row(&row)?;
    insert_event(
        tx,
        &EventRow {
            run: &run,
            from: Some(RunStatus::Queued),
            epoch: None,
            at: now,
            occupancy: None,
            detail: Some(reason),
        },
    )?;
    Ok(true)
}

/// Records a request to stop active run `id`: the cancel flag, and — for the first request
/// only — its instant and words. The status and `reason` are left alone.
pub(super) fn request_stop(
    tx: &mut Transaction<'_>,
    id: RunId,
    reason: &str,
    now: Millis,
) -> Result<()> {
    tx.execute(
        "UPDATE runs SET cancel_requested = TRUE, \
           cancel_requested_at = COALESCE(cancel_requested_at, $2), \
           cancel_reason = COALESCE(cancel_reason, $3) WHERE id = $1",
        &[&id, &now, &reason],
    )?;
    Ok(())
}

/// The instant and words of a run's first cancel request (see the SQLite backend's twin).
pub(super) fn cancel_request(
    tx: &mut Transaction<'_>,
    id: RunId,
) -> Result<(Option<Millis>, Option<String>)> {
    Ok(tx
        .query_opt(
            "SELECT cancel_requested_at, cancel_reason FROM runs WHERE id = $1",
            &[&id],
        )?
        .map(|r| -> Result<_> { Ok((r.try_get(0)?, r.try_get(1)?)) })
        .transpose()?
        .unwrap_or((None, None)))
}

/// One run by id on the caller's connection or transaction; with `lock`, its row is locked
/// (`FOR UPDATE`) until the transaction ends.
pub(super) fn get_run(conn: &mut impl GenericClient, id: RunId, lock: bool) -> Result<Option<Run>> {
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE id = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    conn.query_opt(&sql, &[&id])?
        .as_ref()
        .map(run_from_row)
        .transpose()
}

/// Inserts a queued run and its first event; returns its id. A second run for one schedule
/// occurrence fails here on the unique index `runs_one_per_occurrence`.
pub(super) fn insert_run(
    tx: &mut Transaction<'_>,
    new: &NewRun,
    attempt: u32,
    retry_of: Option<RunId>,
    now: Millis,
) -> Result<RunId> {
    let sql = format!(
        "INSERT INTO runs (project, namespace, status, attempt, trigger, occurrence, priority, \
           not_before, enqueued_at, retry_of, args, env, rerun_of, hook_of) \
         VALUES ($1, $2, 'queued', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
         RETURNING {RUN_COLUMNS}"
    );
    let row = tx.query_opt(
        &sql,
        &[
            &new.project,
            &new.namespace,
            &i64::from(attempt),
            &new.trigger.as_str(),
            &new.occurrence,
            &new.priority,
            &new.not_before,
            &now,
            &retry_of,
            &encode_args(&new.args),
            &encode_env(&new.env),
            &new.rerun_of,
            &new.hook_of,
        ],
    )?;
    let row = row.ok_or_else(|| StoreError::InsertIgnored {
        project: new.project.clone(),
        trigger: new.trigger.as_str().to_string(),
    })?;
    let run = run_from_row(&row)?;
    insert_event(
        tx,
        &EventRow {
            run: &run,
            from: None,
            epoch: None,
            at: now,
            occupancy: None,
            detail: None,
        },
    )?;
    Ok(run.id)
}
