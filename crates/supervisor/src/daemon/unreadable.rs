//! What the daemon cannot read and finds again at every EVAL — a run's files (the reap), an
//! active run's row (another program's write) — logged at doubling intervals, not at every
//! EVAL, and said once it can be read again. Nothing here decides anything about the runs.

use std::collections::BTreeMap;

use store::{RunId, UnreadableRun};

use super::state::Daemon;

/// How many looks in a row found each run unreadable, with what was wrong at the last.
#[derive(Debug, Default)]
pub(super) struct Repeats {
    seen: BTreeMap<RunId, (String, u64)>,
}

/// What one look changed in a [`Repeats`].
struct Noted {
    /// Runs found unreadable before but not now, with how many looks in a row had.
    cleared: Vec<(RunId, u64)>,
    /// Runs to log now, with the count so far: at the 1st, 2nd, 4th, 8th… look in a row that
    /// finds them unreadable, counted again from one when what is wrong changes.
    due: Vec<(RunId, u64)>,
}

impl Repeats {
    /// Takes in one look: `found`, the runs unreadable at it, with what is wrong.
    fn note<'a>(&mut self, found: impl IntoIterator<Item = (RunId, &'a str)>) -> Noted {
        let found: BTreeMap<RunId, &str> = found.into_iter().collect();
        let mut cleared = Vec::new();
        self.seen.retain(|id, (_, n)| {
            let keep = found.contains_key(id);
            if !keep {
                cleared.push((*id, *n));
            }
            keep
        });
        let mut due = Vec::new();
        for (id, error) in found {
            let seen = self
                .seen
                .entry(id)
                .or_insert_with(|| (error.to_string(), 0));
            if seen.0 != error {
                *seen = (error.to_string(), 0);
            }
            seen.1 += 1;
            if seen.1.is_power_of_two() {
                due.push((id, seen.1));
            }
        }
        Noted { cleared, due }
    }
}

impl Daemon {
    /// Logs the runs whose files the reap could not read: each the first time, then at its
    /// 2nd, 4th, 8th… failure in a row, since it is looked at again at every EVAL (every tick)
    /// and a file that stays unreadable must not fill the log. Forgets the count of every run
    /// that was read this time, saying so for one that had failed.
    pub(super) fn note_unreadable(&mut self, unreadable: &[(RunId, u64, String)]) {
        let noted = self
            .reap_failures
            .note(unreadable.iter().map(|(id, _, e)| (*id, e.as_str())));
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
    pub(super) fn note_unreadable_rows(&mut self, found: &[UnreadableRun]) {
        let noted = self
            .unreadable_rows
            .note(found.iter().map(|r| (r.id, r.error.as_str())));
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_found_again_is_due_at_doubling_counts_and_again_when_it_changes() {
        let mut r = Repeats::default();
        let due: Vec<u64> = (0..9)
            .flat_map(|_| r.note([(7, "gone")]).due)
            .map(|(_, n)| n)
            .collect();
        assert_eq!(due, [1, 2, 4, 8]);
        assert_eq!(r.note([(7, "other")]).due, [(7, 1)]);
        let noted = r.note([]);
        assert_eq!(noted.cleared, [(7, 1)]);
        assert!(noted.due.is_empty());
        assert_eq!(r.note([(7, "gone")]).due, [(7, 1)], "counted afresh");
    }
}
