//! End-to-end tests of queueing runs, on the real `fleet` binary:
//!
//! - `args`: a run's own arguments and environment (`enqueue -- ARG…`, `--env`), refused for
//!   a project without `accept_args`, never read by a shell, kept by retries;
//! - `rerun`: `fleet rerun` repeats a run with its arguments;
//! - `priority`: higher priorities first, and the runs table shows them.
//!
//! Every test drives the real `fleet` binary (see tests/e2e/common/mod.rs).

mod args;
mod priority;
mod rerun;
