//! End-to-end tests of operating over time: bounded run logs (`max_log_size`) and the pruning
//! of ended runs (`keep_runs`, `keep_for`, `fleet prune`), on the real `fleet` binary and real
//! processes (see tests/e2e/common/mod.rs).
//!
//! - `log_bound`: a command that writes ten times its log's bound ends `succeeded`, its log
//!   stays under the bound plus the marker line, and `fleet logs` (and `--follow`) show the
//!   marker and never repeat a line.
//! - `history`: `keep_runs` under a schedule and hundreds of runs (rows, run files and the
//!   database stay bounded), a crash inside pruning, `keep_for` on an injected clock, and
//!   `fleet prune --dry-run`.
//! - `orphan`: run files without a row are a `fleet check` violation; prune leaves them.
//! - `race`: `fleet prune` racing the daemon's prune step over one backlog.
//! - `unremovable`: a run whose files cannot be removed is kept and named; the rest is pruned.

mod history;
mod log_bound;
mod orphan;
mod race;
mod unremovable;
