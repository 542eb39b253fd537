//! Schedules, the daemon's side: the EVAL step that fires due occurrences.
//!
//! The timetable itself — what instants a schedule names and what is due at `now` — is pure and
//! shared with the commands: [`config::schedule`]. [`fire_due`] is the EVAL's "fire
//! schedules" step: it reads the persisted cursors, asks the timetable what is due, and writes
//! each fired occurrence (its run and the new cursor) in one transaction through the store.
//!
//! This module must never start a run itself nor keep a cursor in memory: an occurrence is
//! handled only once its run row exists, and the cursor is read back from the database at every
//! EVAL, so a crash between two steps neither loses nor repeats an occurrence.

mod fire;

pub use fire::{fire_due, fire_due_with, FireBackoff, FIRE_BACKOFF_FIRST_MS, FIRE_BACKOFF_MAX_MS};
