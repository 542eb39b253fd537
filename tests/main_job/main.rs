//! End-to-end tests of the main job: caps, how runs end (exit code, timeout, cancel,
//! retries), bad input, a run's environment, event-driven drain, `fleet status` and the
//! one-daemon rule.
//!
//! Every test drives the real `fleet` binary (see tests/common/mod.rs). One module per rule:
//! - `caps`: caps hold, and the overlap sweep that checks them can fail;
//! - `endings`: failure, timeout, cancel, leftovers in the process group, retries;
//! - `bad_input`: bad arguments and configs exit 2 naming what was wrong;
//! - `environment`: what a run's command sees;
//! - `drain`: runs are started by events, the tick is only a backstop;
//! - `status`: `fleet status`, and one daemon per state directory;
//! - `hosts`: a host's own capacity and placement, on one host.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod caps;
mod drain;
mod endings;
mod environment;
mod hosts;
mod status;
