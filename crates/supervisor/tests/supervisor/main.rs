//! The supervisor's integration tests, one test binary (one link) for all of them:
//!
//! - `fire`: the "fire schedules" step of an EVAL against a real store, with the clock injected;
//! - `shim`: the real shim run as its own process (this binary re-executed with
//!   `--fleet-test-shim`) on real commands;
//! - `statedir`: the daemon lock of a state directory.

mod fire;
mod shim;
mod statedir;
