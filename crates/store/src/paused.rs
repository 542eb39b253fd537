//! What the operator holds: [`HoldKind`] and [`Pause`], the rows behind `fleet pause` and
//! `fleet resume`.
//!
//! A paused project or namespace keeps its queued runs, but none of them is claimed, and its
//! schedule's occurrences are recorded as skipped; runs already active go on. Backend-neutral:
//! the SQL is in `sqlite/paused.rs`.

use std::fmt;

use crate::Millis;

/// What a pause holds: one project, or every project of a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HoldKind {
    /// One project, by name.
    Project,
    /// A namespace, by name: every project the config puts in it.
    Namespace,
}

impl HoldKind {
    /// The word stored and shown: `project` or `namespace`.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldKind::Project => "project",
            HoldKind::Namespace => "namespace",
        }
    }

    /// Parses [`HoldKind::as_str`]'s words; `None` for anything else.
    pub fn parse(s: &str) -> Option<HoldKind> {
        match s {
            "project" => Some(HoldKind::Project),
            "namespace" => Some(HoldKind::Namespace),
            _ => None,
        }
    }
}

impl fmt::Display for HoldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One pause in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pause {
    /// A project or a namespace.
    pub kind: HoldKind,
    /// Its name.
    pub name: String,
    /// When it was paused: milliseconds since the Unix epoch, UTC.
    pub since: Millis,
    /// Who paused it (the user the command ran as), when known.
    pub by: Option<String>,
}

/// The pauses in force, as one value the EVAL and the commands ask "is this held?".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pauses(pub Vec<Pause>);

impl Pauses {
    /// The pause that holds `project` (in `namespace`): the project's own, else its
    /// namespace's; `None` when neither is paused.
    pub fn holding(&self, project: &str, namespace: &str) -> Option<&Pause> {
        self.find(HoldKind::Project, project)
            .or_else(|| self.find(HoldKind::Namespace, namespace))
    }

    /// The pause of `kind` named `name`, if any.
    pub fn find(&self, kind: HoldKind, name: &str) -> Option<&Pause> {
        self.0.iter().find(|p| p.kind == kind && p.name == name)
    }

    /// Whether nothing is paused.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
