//! End-to-end tests of several hosts on one PostgreSQL database: three `fleet daemon`s on this
//! machine, each with its own state directory and host name (`a`, `b`, `c`), sharing one
//! database, the way several machines would. Each test gets a new database (the soak: a cluster
//! of its own, which it restarts) and skips loudly where PostgreSQL is not installed, unless
//! `FLEET_REQUIRE_POSTGRES=1`.
//!
//! The evidence is what the commands themselves wrote (`markers`): a start and an end line per
//! run, with the host it ran on. Replayed, they must show no run started twice and no cap
//! exceeded fleet-wide: the global cap, each namespace's, each host's, one run per project.
//!
//! - `clock`: two hosts with clocks 45 s off (libfaketime) are alive to all, cannot be forgotten
//!   without `--force`, say their skew, and a 5-second schedule runs each occurrence once, on
//!   the database's time;
//! - `spread`: 200 runs over two namespaces and three hosts, one host capped;
//! - `soak`: runs flowing while daemons are SIGKILLed and restarted and the database server
//!   is restarted (immediate shutdown);
//! - `fencing`: a frozen host is forgotten, its run retried elsewhere; thawed, it writes nothing
//!   over the rows it lost, ends its stale command and rejoins;
//! - `in_force`: `enqueue`, `rerun` and `pause` on a host whose file differs go by the
//!   published config;
//! - `forget_policy`: a forget retries by the published config, and a second forget writes nothing;
//! - `prune`: each host prunes only the runs it ran; `fleet check` passes on every host;
//! - `publish`: a lower namespace cap published while runs are active on all hosts: no start
//!   until the namespace is under the new cap fleet-wide;
//! - `relayed_log`: a daemon's log API and dashboard (in Chromium too) show another host's
//!   run log;
//! - `published_password`: the published config never holds the `database` password, and a
//!   host's file that differs by its password alone is not said to differ;
//! - `reload_rule`: a rewrite of the same bytes publishes nothing; `fleet reload` replaces a
//!   published config no host can use.
//!
//! Run with `cargo nextest run --all-features --test e2e hosts::`.

mod harness;
mod markers;

mod clock;
mod fencing;
mod forget_policy;
mod in_force;
mod prune;
mod publish;
mod published_password;
mod relayed_log;
mod reload_rule;
mod remote_log;
mod soak;
mod spread;
mod status_name;
