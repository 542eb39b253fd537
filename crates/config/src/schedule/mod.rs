//! The cron model both the daemon and the commands read: which instants a project's schedule
//! names, and what is due at `now` ([`timetable`]); and the next occurrence as the daemon will
//! see it, for `fleet projects` ([`next_occurrence`]).
//!
//! Pure: nothing here does I/O or reads a clock (the caller passes `now`), and no cursor is kept
//! in memory. Firing due occurrences — the EVAL step that writes each occurrence's run and the
//! new cursor in one transaction — is the daemon's (`supervisor::schedule`).

mod next;
pub mod timetable;

pub use next::{next_occurrence, NextOccurrence};
