//! The daemon's slots against the database: a slot the running daemon holds for a run that is
//! no longer active, whose shim has let go of it, counts against every cap of the run and is
//! freed by nothing (`slot_without_active_run`). Such a slot is the daemon's memory, not the
//! database's: it is asked for over the control socket (`slots`), and only a slot still held a
//! while after it was first seen idle is reported, since the daemon frees one at its next EVAL
//! after the shim lets go.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use runrecord::RunFiles;
use store::{RunId, Store, StoreError};

use super::report::{Report, Violation, ViolationKind};
use crate::control::ask_slots;
use crate::statedir::StateDir;

/// How long a slot may stay held for a run that is not active, with its lock free, before it
/// is reported: several EVALs, on a loaded machine.
const IDLE_GRACE: Duration = Duration::from_secs(5);
/// How often the daemon is asked again meanwhile.
const ASK_EVERY: Duration = Duration::from_millis(100);
/// How long the daemon has to answer one request.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Adds a [`ViolationKind::SlotWithoutActiveRun`] finding for each slot the daemon of `state`
/// holds for a run that is not active (ended, queued, or without a row) and whose lock is free,
/// still so after [`IDLE_GRACE`]. Nothing when no daemon answers: with no daemon there are no
/// slots, and one that does not answer is `fleet status`'s to report.
///
/// Errors: the database cannot be read.
pub(super) fn held_for_nothing(
    state: &StateDir,
    store: &Store,
    report: &mut Report,
) -> Result<(), StoreError> {
    let socket = state.socket_path();
    let idle = |ids: Vec<RunId>| -> Result<BTreeSet<RunId>, StoreError> {
        let mut idle = BTreeSet::new();
        for id in ids {
            let active = match store.get_run(id) {
                Ok(run) => run.status.is_active(),
                Err(StoreError::UnknownRun(_)) => false,
                // A row fleet cannot read is reported as such (`unreadable_row`): its slot is
                // held on purpose, until the row can be read.
                Err(e) if e.is_refused_row() => true,
                Err(e) => return Err(e),
            };
            let locked = RunFiles::new(state.root(), id).is_locked();
            // A lock that cannot be probed vouches for nothing: the slot is not reported.
            if !active && matches!(locked, Ok(false)) {
                idle.insert(id);
            }
        }
        Ok(idle)
    };
    // No answer (no daemon, or one that does not answer in time): no slots to compare.
    let asked = || ask_slots(&socket, ANSWER_WITHIN).ok();
    let Some(first) = asked() else {
        return Ok(());
    };
    let mut still = idle(first)?;
    let deadline = Instant::now() + IDLE_GRACE;
    while !still.is_empty() && Instant::now() < deadline {
        std::thread::sleep(ASK_EVERY);
        let Some(now) = asked() else {
            return Ok(());
        };
        let held: BTreeSet<RunId> = now.into_iter().collect();
        still.retain(|id| held.contains(id));
    }
    // Looked at once more at the end: a run queued again and claimed anew meanwhile is active.
    let still = idle(still.into_iter().collect())?;
    for id in still {
        report.violations.push(Violation {
            kind: ViolationKind::SlotWithoutActiveRun,
            run_id: Some(id),
            message: format!(
                "the running daemon holds a slot for run {id}, which is not active and whose shim has let go of it, \
                 for {}s and more: the slot counts against the run's caps and nothing will free it; \
                 restarting the daemon frees it",
                IDLE_GRACE.as_secs()
            ),
        });
    }
    Ok(())
}
