//! Run commands and the run row mapping: enqueue, read one run or a filtered list, cancel one
//! run (or request its stop), or cancel a given list of queued runs.
//!
//! It owns `RUN_COLUMNS` and the one mapping from a `runs` row to [`Run`]; every file that
//! reads whole runs goes through them. Every write here appends its event in the same
//! transaction; none may change an active run's status (that is the daemon's, through
//! `transitions`).

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

use super::events::{insert_event, EventRow};
use super::{is_unreadable_value, SqliteStore};
use crate::decide::cancel::{cancel_run, CancelWrites};
use crate::decide::run_columns::{decode_columns, encode_args, encode_env, Decoded, TextColumns};
use crate::error::Result;
use crate::{
    CancelOutcome, Millis, NewRun, Run, RunFilter, RunId, RunRows, RunStatus, StoreError,
    UnreadableRun,
};

pub(super) use crate::decide::run_columns::RUN_COLUMNS;

/// Maps a row selected as [`RUN_COLUMNS`] to a [`Run`]. The outer error is SQLite's; the inner
/// one [`StoreError::Corrupt`], for a status or trigger this version does not know.
pub(super) fn run_from_row(
    row: &Row<'_>,
) -> rusqlite::Result<std::result::Result<Run, StoreError>> {
    let id: RunId = row.get(0)?;
    let text = TextColumns {
        status: row.get(3)?,
        trigger: row.get(5)?,
        args: row.get(20)?,
        env: row.get(21)?,
    };
    let Decoded {
        status,
        trigger,
        args,
        env,
    } = match decode_columns(id, text) {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(Run {
        id,
        project: row.get(1)?,
        namespace: row.get(2)?,
        status,
        attempt: row.get(4)?,
        trigger,
        occurrence: row.get(6)?,
        priority: row.get(7)?,
        not_before: row.get(8)?,
        enqueued_at: row.get(9)?,
        started_at: row.get(10)?,
        finished_at: row.get(11)?,
        pid: row.get(12)?,
        exit_code: row.get(13)?,
        signal: row.get(14)?,
        reason: row.get(15)?,
        cancel_requested: row.get::<_, i64>(16)? != 0,
        claim_token: row.get::<_, i64>(17)? as u64,
        epoch: row.get(18)?,
        retry_of: row.get(19)?,
        args,
        env,
        rerun_of: row.get(22)?,
        hook_of: row.get(23)?,
        seat: row.get(24)?,
        host: row.get(25)?,
    }))
}

/// Every row of a statement selecting [`RUN_COLUMNS`], sorted into those [`run_from_row`]
/// reads and those it cannot (a value another program wrote): what names an unreadable one,
/// and counts its seat, is read on its own (see [`crate::UnreadableRun`]).
///
/// Errors: SQLite's, for anything but a row's own unreadable value.
pub(super) fn collect_rows(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
) -> Result<RunRows> {
    let rows = stmt.query_map(params, |row| match run_from_row(row) {
        Ok(Ok(run)) => Ok(Ok(run)),
        Ok(Err(e)) => unreadable_from_row(row, e.to_string()).map(Err),
        Err(e) if is_unreadable_value(&e) => {
            unreadable_from_row(row, unreadable_value(row, &e)?).map(Err)
        }
        Err(e) => Err(e),
    })?;
    let mut out = RunRows::default();
    for row in rows {
        match row? {
            Ok(run) => out.runs.push(run),
            Err(bad) => out.unreadable.push(bad),
        }
    }
    Ok(out)
}

/// What counts the seat of a row [`run_from_row`] could not read (`error`): columns whose
/// type SQLite enforces (`STRICT`), read as bytes so that no value can fail them.
fn unreadable_from_row(row: &Row<'_>, error: String) -> rusqlite::Result<UnreadableRun> {
    let bytes =
        |i: usize| -> rusqlite::Result<Option<&[u8]>> { Ok(row.get_ref(i)?.as_bytes_or_null()?) };
    let names = [bytes(1)?, bytes(2)?, bytes(25)?];
    let seat_known = names
        .iter()
        .all(|b| b.is_none_or(|b| std::str::from_utf8(b).is_ok()));
    let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
    Ok(UnreadableRun {
        id: row.get(0)?,
        project: text(names[0]).unwrap_or_default(),
        namespace: text(names[1]).unwrap_or_default(),
        host: text(names[2]),
        seat_known,
        claim_token: row.get::<_, i64>(17)? as u64,
        error,
    })
}

/// Column `i` of `row`, text or bytes, as a `String` whatever it holds: bytes that are not
/// UTF-8 replaced as `String::from_utf8_lossy` does. For names another program may have
/// written, read where one bad name must not stop the read of every other row.
pub(super) fn lossy_text(row: &Row<'_>, i: usize) -> rusqlite::Result<String> {
    Ok(row
        .get_ref(i)?
        .as_bytes_or_null()?
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default())
}

/// `e`, a value of `row` that does not fit its column's type ([`is_unreadable_value`]), in
/// the words of [`StoreError::Corrupt`]: the run, the column by name, the value when known.
fn unreadable_value(row: &Row<'_>, e: &rusqlite::Error) -> rusqlite::Result<String> {
    let id: RunId = row.get(0)?;
    let column = |i: usize| {
        row.as_ref()
            .column_name(i)
            .map_or_else(|_| format!("#{i}"), str::to_string)
    };
    Ok(match e {
        rusqlite::Error::IntegralValueOutOfRange(i, value) => format!(
            "run {id}: column {} holds {value}, which fleet does not understand (out of range)",
            column(*i)
        ),
        rusqlite::Error::InvalidColumnType(i, _, found) => format!(
            "run {id}: column {} holds a value of type {found}, which fleet does not understand",
            column(*i)
        ),
        rusqlite::Error::FromSqlConversionFailure(i, _, why) => {
            format!("run {id}: column {} cannot be read: {why}", column(*i))
        }
        rusqlite::Error::Utf8Error(i, why) => {
            format!("run {id}: column {} is not UTF-8 text: {why}", column(*i))
        }
        other => format!("run {id}: {other}"),
    })
}

/// Runs every row of a statement selecting [`RUN_COLUMNS`] through [`run_from_row`].
pub(super) fn collect_runs(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
) -> Result<Vec<Run>> {
    let rows = stmt.query_map(params, run_from_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}

impl SqliteStore {
    /// [`crate::Store::enqueue`]: the insert and its event in one `BEGIN IMMEDIATE` transaction.
    pub(crate) fn enqueue(&self, new: &NewRun, now: Millis) -> Result<RunId> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let id = insert_run(&tx, new, 1, None, now)?;
        tx.commit()?;
        Ok(id)
    }

    /// [`crate::Store::get_run`].
    pub(crate) fn get_run(&self, id: RunId) -> Result<Run> {
        let conn = self.conn()?;
        get_run(&conn, id)?.ok_or(StoreError::UnknownRun(id))
    }

    /// [`crate::Store::list_rows`]; no limit is SQLite's `LIMIT -1`.
    pub(crate) fn list_rows(&self, filter: &RunFilter) -> Result<RunRows> {
        let conn = self.conn()?;
        // One statement for every combination: an absent filter is NULL and matches all. The
        // statuses travel as one JSON array, read back with json_each.
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE (?1 IS NULL OR project = ?1) \
             AND (?2 IS NULL OR status = ?2) \
             AND (?4 IS NULL OR status IN (SELECT value FROM json_each(?4))) \
             AND (?5 IS NULL OR namespace = ?5) AND (?6 IS NULL OR trigger = ?6) \
             AND (?7 IS NULL OR enqueued_at >= ?7) AND (?8 IS NULL OR enqueued_at <= ?8) \
             ORDER BY id DESC LIMIT ?3"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let limit = filter.limit.map(i64::from).unwrap_or(-1);
        let statuses = (!filter.statuses.is_empty()).then(|| {
            let words: Vec<String> = filter
                .statuses
                .iter()
                .map(|s| format!("\"{}\"", s.as_str()))
                .collect();
            format!("[{}]", words.join(","))
        });
        collect_rows(
            &mut stmt,
            params![
                filter.project,
                filter.status.map(|s| s.as_str()),
                limit,
                statuses,
                filter.namespace,
                filter.trigger.map(|t| t.as_str()),
                filter.since,
                filter.until
            ],
        )
    }

    /// [`crate::Store::request_cancel`]: the status is read and written in one
    /// `BEGIN IMMEDIATE` transaction, so a claim cannot slip in between.
    pub(crate) fn request_cancel(
        &self,
        id: RunId,
        reason: &str,
        now: Millis,
    ) -> Result<CancelOutcome> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let run = get_run(&tx, id)?.ok_or(StoreError::UnknownRun(id))?;
        let outcome = cancel_run(&mut RunTx(&tx), id, run.status, reason, now)?
            .unwrap_or(CancelOutcome::Cancelled);
        tx.commit()?;
        Ok(outcome)
    }

    /// [`crate::Store::cancel_queued_runs`]: one guarded `UPDATE … WHERE id = ? AND status =
    /// 'queued'` per run, each with its event, in one transaction.
    pub(crate) fn cancel_queued_runs(
        &self,
        ids: &[RunId],
        reason: &str,
        now: Millis,
    ) -> Result<Vec<RunId>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut cancelled = Vec::new();
        for &id in ids {
            if !cancel_if_queued(&tx, id, reason, now)? {
                continue;
            }
            cancelled.push(id);
        }
        tx.commit()?;
        Ok(cancelled)
    }
}

/// The caller's transaction, for the writes of the neutral decisions ([`crate::decide`]).
pub(super) struct RunTx<'c>(pub(super) &'c Connection);

impl CancelWrites for RunTx<'_> {
    fn cancel_if_queued(&mut self, id: RunId, reason: &str, now: Millis) -> Result<bool> {
        cancel_if_queued(self.0, id, reason, now)
    }

    fn request_stop(&mut self, id: RunId, reason: &str, now: Millis) -> Result<()> {
        request_stop(self.0, id, reason, now)
    }
}

/// Ends run `id` `cancelled` with `reason` if it is still `queued`, and appends the event, in
/// the caller's transaction. Returns whether it did (false: the run had left the queue).
///
/// Errors: any store error.
pub(super) fn cancel_if_queued(
    conn: &Connection,
    id: RunId,
    reason: &str,
    now: Millis,
) -> Result<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE runs SET status = 'cancelled', finished_at = ?2, reason = ?3 \
             WHERE id = ?1 AND status = 'queued'",
        )?
        .execute(params![id, now, reason])?;
    if n == 0 {
        return Ok(false);
    }
    let run = get_run(conn, id)?.ok_or(StoreError::UnknownRun(id))?;
    insert_event(
        conn,
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

/// Records a request to stop active run `id` (`fleet cancel`, or a schedule's `replace`): the
/// cancel flag, and — for the first request only — its instant `now` and its words `reason`.
/// The status and `reason` are left alone: the run's end decides what it says (see
/// `transitions`).
pub(super) fn request_stop(conn: &Connection, id: RunId, reason: &str, now: Millis) -> Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET cancel_requested = 1, \
           cancel_requested_at = COALESCE(cancel_requested_at, ?2), \
           cancel_reason = COALESCE(cancel_reason, ?3) WHERE id = ?1",
    )?
    .execute(params![id, now, reason])?;
    Ok(())
}

/// What was asked when a run's cancel was requested: the instant of the first request
/// (milliseconds since the epoch, UTC) and its words. Both `None` for a run without a request,
/// and for one whose request was recorded before the database kept them (its words are then in
/// `reason`).
pub(super) fn cancel_request(
    conn: &Connection,
    id: RunId,
) -> Result<(Option<Millis>, Option<String>)> {
    Ok(conn
        .prepare_cached("SELECT cancel_requested_at, cancel_reason FROM runs WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .unwrap_or((None, None)))
}

/// One run by id, read on the caller's connection (inside its transaction, if it has one).
pub(super) fn get_run(conn: &Connection, id: RunId) -> Result<Option<Run>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    match stmt.query_row([id], run_from_row).optional()? {
        Some(r) => Ok(Some(r?)),
        None => Ok(None),
    }
}

/// Inserts a queued run and its first event; returns its id. `attempt` and `retry_of` tell a
/// retry from a first attempt. A second run for one schedule occurrence fails here on the
/// unique index `runs_one_per_occurrence`.
pub(super) fn insert_run(
    conn: &Connection,
    new: &NewRun,
    attempt: u32,
    retry_of: Option<RunId>,
    now: Millis,
) -> Result<RunId> {
    let sql = format!(
        "INSERT INTO runs (project, namespace, status, attempt, trigger, occurrence, priority, not_before, \
           enqueued_at, retry_of, args, env, rerun_of, hook_of) \
           VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) RETURNING {RUN_COLUMNS}"
    );
    let run = conn
        .prepare_cached(&sql)?
        .query_row(
            params![
                new.project,
                new.namespace,
                attempt,
                new.trigger.as_str(),
                new.occurrence,
                new.priority,
                new.not_before,
                now,
                retry_of,
                encode_args(&new.args),
                encode_env(&new.env),
                new.rerun_of,
                new.hook_of
            ],
            run_from_row,
        )
        .optional()?
        .ok_or_else(|| StoreError::InsertIgnored {
            project: new.project.clone(),
            trigger: new.trigger.as_str().to_string(),
        })??;
    insert_event(
        conn,
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
