//! End-to-end tests of what tells an operator or a service manager that the daemon is well:
//! `fleet status`'s exit status and `daemon.state` (running / stuck / stopped), the sd_notify
//! messages the daemon sends under systemd, its log formats, and the shipped systemd unit; and
//! that a typo in fleet.toml fails none of it (`typo`); the daemon's slots as `fleet check`
//! compares them with the database (`slots`).
//!
//! Run with `cargo test --all-features --test e2e health::` (the stuck-loop test injects a
//! failpoint).

mod logs;
mod notify;
mod slots;
mod status;
mod typo;
mod unit;
