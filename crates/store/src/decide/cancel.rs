//! What cancelling one run writes, given its status: a queued run ends `cancelled` at once; an
//! active run gets a cancel *request* (its status changes only once its process is gone, by a
//! transition); an ended run is left as it is. Shared by `fleet cancel` of one run, the bulk
//! cancel and a schedule's overlap = "replace".
//!
//! A backend supplies the two guarded writes ([`CancelWrites`]) on the transaction that read
//! the status; nothing here may change an active run's status.

use crate::error::Result;
use crate::{CancelOutcome, CancelSelection, Millis, RunId, RunStatus};

/// The two writes a cancel is made of, on the backend's transaction, each with its event.
pub(crate) trait CancelWrites {
    /// Ends run `id` `cancelled` with `reason` if it is still `queued`; whether it did (false:
    /// it had left the queue, and nothing was written).
    fn cancel_if_queued(&mut self, id: RunId, reason: &str, now: Millis) -> Result<bool>;
    /// Records a cancel request with `reason` on the active run `id` (the first request's
    /// instant and words are kept).
    fn request_stop(&mut self, id: RunId, reason: &str, now: Millis) -> Result<()>;
}

/// Cancels run `id`, read as `status` in the writing transaction. `None` when a queued run's
/// guarded update matched nothing (it left the queue meanwhile). Errors: the writes'.
pub(crate) fn cancel_run(
    w: &mut impl CancelWrites,
    id: RunId,
    status: RunStatus,
    reason: &str,
    now: Millis,
) -> Result<Option<CancelOutcome>> {
    Ok(Some(match status {
        RunStatus::Queued => {
            if !w.cancel_if_queued(id, reason, now)? {
                return Ok(None);
            }
            CancelOutcome::Cancelled
        }
        RunStatus::Starting | RunStatus::Running => {
            w.request_stop(id, reason, now)?;
            CancelOutcome::Requested
        }
        done => CancelOutcome::AlreadyFinished(done),
    }))
}

/// What a bulk cancel selects by: the column (`project` or `namespace`, fixed names, never
/// input) and its value (`None`: every run).
pub(crate) fn selection(selection: &CancelSelection) -> (&'static str, Option<&str>) {
    match selection {
        CancelSelection::Project(p) => ("project", Some(p.as_str())),
        CancelSelection::Namespace(n) => ("namespace", Some(n.as_str())),
        CancelSelection::All => ("project", None),
    }
}

/// The statuses a bulk cancel selects, as an SQL list every backend accepts.
pub(crate) fn selected_statuses(queued_only: bool) -> &'static str {
    if queued_only {
        "('queued')"
    } else {
        "('queued', 'starting', 'running')"
    }
}

/// The status a bulk cancel's selection row stands for: it selects queued and active runs only,
/// and an active run's cancel is a request whichever active status it is in.
pub(crate) fn selected_status(stored: &str) -> RunStatus {
    if stored == "queued" {
        RunStatus::Queued
    } else {
        RunStatus::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log(Vec<String>, bool);

    impl CancelWrites for Log {
        fn cancel_if_queued(&mut self, id: RunId, _: &str, _: Millis) -> Result<bool> {
            self.0.push(format!("end {id}"));
            Ok(!self.1)
        }
        fn request_stop(&mut self, id: RunId, _: &str, _: Millis) -> Result<()> {
            self.0.push(format!("request {id}"));
            Ok(())
        }
    }

    #[test]
    fn an_active_run_gets_a_request_never_a_new_status() {
        let mut w = Log::default();
        let out = cancel_run(&mut w, 3, RunStatus::Running, "op", 0).unwrap();
        assert_eq!(out, Some(CancelOutcome::Requested));
        assert_eq!(w.0, vec!["request 3".to_string()]);
    }

    #[test]
    fn a_queued_run_ends_and_an_ended_run_is_left_alone() {
        let mut w = Log::default();
        assert_eq!(
            cancel_run(&mut w, 3, RunStatus::Queued, "op", 0).unwrap(),
            Some(CancelOutcome::Cancelled)
        );
        let done = cancel_run(&mut w, 4, RunStatus::Failed, "op", 0).unwrap();
        assert_eq!(
            done,
            Some(CancelOutcome::AlreadyFinished(RunStatus::Failed))
        );
        assert_eq!(w.0, vec!["end 3".to_string()]);
        w.1 = true;
        assert_eq!(
            cancel_run(&mut w, 5, RunStatus::Queued, "op", 0).unwrap(),
            None
        );
    }
}
