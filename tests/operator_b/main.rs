//! End-to-end tests of the operator's commands for holding and spreading work: parallel runs of
//! one project (`max_parallel`), `fleet pause` / `fleet resume`, the `fleet runs` filters and
//! layout, and `fleet projects`.
//!
//! Every test drives the real `fleet` binary (see tests/common/mod.rs). One module per feature:
//! - `parallel`: `max_parallel = 3` never lets more than three runs of a project be active, by
//!   the commands' own start and end records, across a SIGKILL of the daemon;
//! - `pause`: a paused namespace holds its queued runs across a restart until `fleet resume`; a
//!   paused project's schedule records skips and fires again after resume;
//! - `runs`: filters, the layout at 80 columns, the plain form for pipes;
//! - `projects`: the projects view, text and JSON.

#[path = "../common/mod.rs"]
mod common;

mod helpers;
mod parallel;
mod pause;
mod projects;
mod runs;
// RFC 3339 as fleet prints it, read independently of fleet's code.
#[path = "../schedules/time.rs"]
#[allow(dead_code)]
mod time;
