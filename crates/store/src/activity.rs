//! [`ProjectActivity`]: what `fleet projects` shows of each project's runs. Backend-neutral;
//! the SQL is in `sqlite/activity.rs`.

use crate::{Run, UnreadableRun};

/// One project's runs, summed up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectActivity {
    /// The project.
    pub project: String,
    /// Its runs in status `queued`.
    pub queued: u64,
    /// Its active runs (`starting` or `running`).
    pub active: u64,
    /// Its latest run (highest id) in a final status, if any and if its row can be read.
    pub last_ended: Option<Run>,
    /// That latest ended run's row, when it holds a value fleet cannot read (another
    /// program's write): then [`ProjectActivity::last_ended`] is `None`.
    pub last_ended_unreadable: Option<UnreadableRun>,
}
