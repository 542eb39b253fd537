//! End-to-end tests of the main job, running runs: caps, how runs end (exit code, timeout,
//! cancel, retries), bad input, a run's environment, event-driven drain, `fleet status` and the
//! one-daemon rule.
//!
//! Every test drives the real `fleet` binary (see tests/e2e/common/mod.rs). One module per
//! rule:
//! - `caps`: caps hold, and the overlap sweep that checks them can fail;
//! - `parallel`: `max_parallel = 3` never lets more than three runs of a project be active, by
//!   the commands' own start and end records, across a SIGKILL of the daemon;
//! - `endings`: failure, timeout, cancel, leftovers in the process group, retries;
//! - `bad_input`: bad arguments and configs exit 2 naming what was wrong;
//! - `environment`: what a run's command sees;
//! - `drain`: runs are started by events, the tick is only a backstop;
//! - `status`: `fleet status`, and one daemon per state directory;
//! - `hosts`: a host's own capacity and placement, on one host.

mod bad_input;
mod caps;
mod drain;
mod endings;
mod environment;
mod hosts;
mod parallel;
mod status;
