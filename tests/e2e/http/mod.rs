//! End-to-end tests of the daemon's HTTP listener (`http_listen`) on the real `fleet` binary:
//!
//! - `metrics`: `/metrics` scraped during a drain agrees with `fleet runs --json`, and the
//!   whole exposition parses as Prometheus text;
//! - `health`: `/healthz` answers 200 while the loop turns, 503 (saying why) while it is stuck
//!   on a database another program keeps locked, and 200 again once it is released;
//! - `api`: the JSON under `/api/` is what the commands print; logs by run id only; no
//!   endpoint changes anything; a unix socket works; an address that cannot be bound stops the
//!   daemon at start, naming it;
//! - `limits`: connections over the cap cost no descriptor, unfinished headers are timed out;
//! - `socket`: a unix socket path never replaces a socket in use or a plain file;
//! - `host`: a foreign Host header is refused (DNS rebinding);
//! - `utf8`: log chunks start and end on character boundaries;
//! - `unknown`: `/api/runs` for an unknown project or namespace is 404;
//! - `overdue`: a schedule the database refuses reads as overdue in `/metrics`;
//! - `refused_claims`: a refused claim neither holds up its project nor spins the daemon;
//! - `alerts`: the alert rules in docs/OPERATIONS.md name only metrics `/metrics` serves;
//! - `browser`: the dashboard in headless Chromium follows a run from the queue to its end and
//!   its log, without a reload.
//!
//! Run with `cargo test --all-features --test e2e http::`.

mod alerts;
mod api;
mod browser;
mod health;
mod host;
mod limits;
mod metrics;
mod overdue;
mod ready;
mod refused_claims;
mod removed;
mod socket;
mod unknown;
mod utf8;

use std::path::Path;

use crate::common::*;

/// A command that appends `start $FLEET_RUN_ID` to `<dir>/starts`, prints a line, waits until
/// `<dir>/GO` exists, then exits `code`.
pub fn gated(dir: &Path, code: i32) -> String {
    sh(&format!(
        "echo start $FLEET_RUN_ID >> {starts}; echo \"run $FLEET_RUN_ID says hello\"; \
         while [ ! -e {go} ]; do sleep 0.05; done; \
         echo \"run $FLEET_RUN_ID done\"; exit {code}",
        starts = shell_quote(&dir.join("starts")),
        go = shell_quote(&dir.join("GO")),
    ))
}
