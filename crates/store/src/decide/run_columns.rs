//! The `runs` table's columns as every backend reads and writes them: the column list
//! ([`RUN_COLUMNS`]), the text encoding of `args` and `env`, and the checks that turn the text
//! columns (`status`, `trigger`, `args`, `env`) back into model values.
//!
//! A backend still reads each column through its own driver (`rusqlite::Row` and
//! `postgres::Row` share no trait); what a column *means* is decided here once. Nothing here
//! may silently default a value this version cannot read: that is [`StoreError::Corrupt`].
//!
//! Reads of many rows that must go on past such a row (`Store::active_rows`,
//! `Store::list_rows`) return a `RunRows`: the runs read, and apart the `UnreadableRun`s, which
//! keep what counts a seat; `Store::active_runs` and `Store::list_runs` make the first of those
//! an error (`StoreError::UnreadableRow`). A write to such a row is a refused row
//! (`StoreError::is_refused_row`): the row's own problem, never the whole EVAL's.

use crate::{RunId, RunStatus, StoreError, Trigger};

/// The columns of `runs`, in the order each backend's `run_from_row` reads them.
pub(crate) const RUN_COLUMNS: &str =
    "id, project, namespace, status, attempt, trigger, occurrence, priority, \
     not_before, enqueued_at, started_at, finished_at, pid, exit_code, signal, reason, \
     cancel_requested, claim_token, epoch, retry_of, args, env, rerun_of, hook_of, seat, host";

/// A run's `args` column: a JSON array of strings, NULL for none.
pub(crate) fn encode_args(args: &[String]) -> Option<String> {
    (!args.is_empty()).then(|| serde_json::to_string(args).expect("strings serialise"))
}

/// A run's `env` column: a JSON array of `[name, value]` pairs in the order given (a later
/// pair wins, as in an environment), NULL for none.
pub(crate) fn encode_env(env: &[(String, String)]) -> Option<String> {
    (!env.is_empty()).then(|| serde_json::to_string(env).expect("strings serialise"))
}

/// The text columns of one run row, as read.
pub(crate) struct TextColumns {
    /// `status`.
    pub(crate) status: String,
    /// `trigger`.
    pub(crate) trigger: String,
    /// `args` (NULL: none).
    pub(crate) args: Option<String>,
    /// `env` (NULL: none).
    pub(crate) env: Option<String>,
}

/// The text columns of run `id` as model values.
pub(crate) struct Decoded {
    /// The run's status.
    pub(crate) status: RunStatus,
    /// What made it.
    pub(crate) trigger: Trigger,
    /// Its extra arguments.
    pub(crate) args: Vec<String>,
    /// Its extra environment, in order.
    pub(crate) env: Vec<(String, String)>,
}

/// Decodes run `id`'s text columns. Errors: [`StoreError::Corrupt`] naming the run, the
/// column and its text, for a status, trigger, args or env this version cannot read (a newer
/// version's row, or a damaged one): a run is never shown or run with a guessed value.
pub(crate) fn decode_columns(id: RunId, c: TextColumns) -> Result<Decoded, StoreError> {
    let corrupt = |column, value: String| StoreError::Corrupt {
        run: id,
        column,
        value,
    };
    let status = match c.status.parse::<RunStatus>() {
        Ok(s) => s,
        Err(_) => return Err(corrupt("status", c.status)),
    };
    let Some(trigger) = Trigger::parse(&c.trigger) else {
        return Err(corrupt("trigger", c.trigger));
    };
    let Ok(args) = decode::<Vec<String>>(c.args.as_deref()) else {
        return Err(corrupt("args", c.args.unwrap_or_default()));
    };
    let Ok(env) = decode::<Vec<(String, String)>>(c.env.as_deref()) else {
        return Err(corrupt("env", c.env.unwrap_or_default()));
    };
    Ok(Decoded {
        status,
        trigger,
        args,
        env,
    })
}

/// Reads an `args` or `env` column back; `Err` for text this version cannot read.
fn decode<T: serde::de::DeserializeOwned + Default>(text: Option<&str>) -> Result<T, ()> {
    match text {
        None => Ok(T::default()),
        Some(t) => serde_json::from_str(t).map_err(|_| ()),
    }
}
