//! [`ProjectActivity`]: what `fleet projects` shows of each project's runs. Backend-neutral;
//! the SQL is in `sqlite/activity.rs`.

use crate::Run;

/// One project's runs, summed up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectActivity {
    /// The project.
    pub project: String,
    /// Its runs in status `queued`.
    pub queued: u64,
    /// Its active runs (`starting` or `running`).
    pub active: u64,
    /// Its latest run (highest id) in a final status, if any.
    pub last_ended: Option<Run>,
}
