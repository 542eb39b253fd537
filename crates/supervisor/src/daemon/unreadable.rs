//! What the daemon cannot read and finds again at every EVAL — a run's files (the reap), an
//! active run's row (another program's write) — logged at doubling intervals, not at every
//! EVAL, and said once it can be read again. Nothing here decides anything about the runs.

use std::collections::BTreeMap;

use store::{RunId, UnreadableRun};

use super::state::repeats::Repeats;

/// Logs the runs whose files the reap could not read: each the first time, then at its
/// 2nd, 4th, 8th… failure in a row, since it is looked at again at every EVAL (every tick)
/// and a file that stays unreadable must not fill the log. Forgets the count of every run
/// that was read this time, saying so for one that had failed.
pub(super) fn note_unreadable(reap_failures: &mut Repeats, unreadable: &[(RunId, u64, String)]) {
    let noted = reap_failures.note(unreadable.iter().map(|(id, _, e)| (*id, e.as_str())));
    for (run, failures) in noted.cleared {
        tracing::info!(run, failures, "the run's files can be read again");
    }
    let errors: BTreeMap<RunId, &str> = unreadable
        .iter()
        .map(|(id, _, e)| (*id, e.as_str()))
        .collect();
    for (run, failures) in noted.due {
        let error = errors[&run];
        tracing::error!(run, error = %error, failures, "cannot read or lock the run's files; looking again at every EVAL (logged again at the 2nd, 4th, 8th… failure)");
    }
}

/// Logs the active rows an EVAL could not read (another program's write): each when first
/// found (or found with another error), then at its 2nd, 4th, 8th… EVAL in a row, since
/// every EVAL reads them again. Its seat was counted; it is settled, or its shim's report
/// written, once it can be read. A row found readable again (or no longer active) is
/// forgotten, and said so.
pub(super) fn note_unreadable_rows(unreadable_rows: &mut Repeats, found: &[UnreadableRun]) {
    let noted = unreadable_rows.note(found.iter().map(|r| (r.id, r.error.as_str())));
    for (run, _) in noted.cleared {
        tracing::info!(
            run,
            "the run's row can be read again, or is no longer active"
        );
    }
    let rows: BTreeMap<RunId, &UnreadableRun> = found.iter().map(|r| (r.id, r)).collect();
    for (id, evals) in noted.due {
        let row = rows[&id];
        if row.seat_known {
            tracing::error!(run = id, project = %row.project, error = %row.error, evals, "an active run's row holds a value fleet cannot read (another program wrote it): its seat is counted, and the run is settled once the row is fixed (logged again at the 2nd, 4th, 8th… EVAL)");
        } else {
            tracing::error!(run = id, project = %row.project, error = %row.error, evals, "an active run's row holds a project, namespace or host that is not UTF-8 text (another program wrote it): which caps it counts against cannot be told, so no run is claimed until the row is fixed (logged again at the 2nd, 4th, 8th… EVAL)");
        }
    }
}
