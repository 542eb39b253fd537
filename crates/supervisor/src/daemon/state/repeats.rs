//! How many looks in a row found each run unreadable, for the daemon's state: what the daemon
//! logs of it, and when, is `daemon/unreadable.rs`. Nothing here decides anything about the
//! runs.

use std::collections::BTreeMap;

use store::RunId;

/// How many looks in a row found each run unreadable, with what was wrong at the last.
#[derive(Debug, Default)]
pub(in crate::daemon) struct Repeats {
    seen: BTreeMap<RunId, (String, u64)>,
}

/// What one look changed in a [`Repeats`].
pub(in crate::daemon) struct Noted {
    /// Runs found unreadable before but not now, with how many looks in a row had.
    pub(in crate::daemon) cleared: Vec<(RunId, u64)>,
    /// Runs to log now, with the count so far: at the 1st, 2nd, 4th, 8th… look in a row that
    /// finds them unreadable, counted again from one when what is wrong changes.
    pub(in crate::daemon) due: Vec<(RunId, u64)>,
}

impl Repeats {
    /// Takes in one look: `found`, the runs unreadable at it, with what is wrong.
    pub(in crate::daemon) fn note<'a>(
        &mut self,
        found: impl IntoIterator<Item = (RunId, &'a str)>,
    ) -> Noted {
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
