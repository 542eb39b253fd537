//! Row types of the operator's bulk commands (`fleet cancel --project/--namespace/--all`):
//! which runs a bulk cancel selects, and what became of each. Backend-neutral, plain data.

use crate::{CancelOutcome, RunId};

/// Which runs a bulk cancel selects, among those not yet ended (`queued`, `starting`,
/// `running`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelSelection {
    /// The runs of this project.
    Project(String),
    /// The runs recorded against this namespace (the `namespace` `fleet runs` shows).
    Namespace(String),
    /// Every run.
    All,
}

/// One run a bulk cancel reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BulkCancelled {
    /// The run.
    pub run_id: RunId,
    /// Its project.
    pub project: String,
    /// [`CancelOutcome::Cancelled`] for a run that was queued (now `cancelled`),
    /// [`CancelOutcome::Requested`] for an active one (the daemon stops it).
    pub outcome: CancelOutcome,
}
