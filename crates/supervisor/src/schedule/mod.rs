//! Schedules: a project's cron timetable, and the EVAL step that fires its due occurrences.
//!
//! Two parts, one on each side of the database:
//!
//! * [`timetable`] is pure: it never does I/O and never reads a clock (the caller passes
//!   `now`). It answers "what is the next occurrence" ([`timetable::Timetable::next_after`])
//!   and "given the persisted cursor and `now`, what is due" ([`timetable::due`]).
//! * [`fire_due`] is the EVAL's "fire schedules" step: it reads the persisted cursors, asks the
//!   timetable what is due, and writes each fired occurrence (its run and the new cursor) in one
//!   transaction through the store.
//! * [`next_occurrence`] answers "when is the next one" for `fleet projects`, from the persisted
//!   cursor and the same timetable.
//!
//! This module must never start a run itself nor keep a cursor in memory: an occurrence is
//! handled only once its run row exists, and the cursor is read back from the database at every
//! EVAL, so a crash between two steps neither loses nor repeats an occurrence.

mod fire;
mod next;
pub mod timetable;

pub use fire::{fire_due, fire_due_with, FireBackoff, FIRE_BACKOFF_FIRST_MS, FIRE_BACKOFF_MAX_MS};
pub use next::{next_occurrence, NextOccurrence};
