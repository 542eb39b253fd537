//! Totals for monitoring: how many runs ended, per project and status, and the queue's size and
//! age per namespace. Plain data, read by the daemon's `/metrics` and dashboard.
//!
//! Each is kept or computed so that reading it costs in proportion to the projects and
//! namespaces (and, for the queue, to its length), never to the history.

use crate::{Millis, RunStatus};

/// How many runs of one project ended with one status, since the database was created. Kept
/// by the database as runs end, so pruning history never lowers it (a Prometheus counter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedTotal {
    /// The project.
    pub project: String,
    /// The terminal status.
    pub status: RunStatus,
    /// How many runs of `project` reached `status`.
    pub count: u64,
    /// When the latest of them ended, in [`Millis`] (UTC).
    pub last_finished_at: Option<Millis>,
}

/// The queued runs of one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSummary {
    /// The namespace the runs were queued in.
    pub namespace: String,
    /// How many runs are queued (delayed retries included).
    pub queued: u64,
    /// When the oldest of them was queued, in [`Millis`] (UTC).
    pub oldest_enqueued_at: Millis,
    /// Among the runs ready at the `now` asked for (`not_before` ≤ now: delayed retries still
    /// waiting out their backoff left out), the earliest time one became ready, in [`Millis`]
    /// (UTC): the later of its `enqueued_at` and its `not_before`. `None` when none is ready.
    pub oldest_ready_at: Option<Millis>,
}
