//! The packer's integration tests, one test binary (one link) for all of them:
//!
//! - `failure_one`: "double spawn after restart" at packer level: a run the database records as
//!   running counts, whatever the slot pool knows;
//! - `properties`: property tests of both packers against an oracle, over random caps, running
//!   sets and queues;
//! - `parallel`: property tests of `max_parallel`;
//! - `hosts`: property tests of a host's own capacity and of placement.
//!
//! Proptest keeps the cases it once shrank a failure to in `../proptest-regressions/<module>.txt`
//! (its default place for a test binary in a folder with a `main.rs`) and runs them first.

mod failure_one;
mod hosts;
mod parallel;
mod properties;
