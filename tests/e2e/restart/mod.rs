//! End-to-end tests of what a restart must keep: a daemon killed with SIGKILL comes back and
//! adopts what is still running (with and without namespaces), finalizes what ended while it was
//! down, survives an external writer holding the database's write lock, refuses to share its
//! state directory, and never starts a run twice across crashes injected with failpoints (the
//! late-shim tombstone trap, a crash right after the claim).
//!
//! Every test drives the real `fleet` binary (see tests/e2e/common/mod.rs); run them with
//! `cargo test --all-features --test e2e restart::` so the binary has its failpoints compiled
//! in.
//!
//! The `failure1_`, `failure2_` and `failure3_` tests are named after the three failures fleet
//! exists to make impossible: a run started twice after a restart because a packer counted only
//! the in-memory slot pool; a still-queued run handed out again while another connection holds
//! the database's write lock; two runners sharing one state directory. One module per rule:
//! - `adoption`: every packer counts the runs the database records as active (adopted or not);
//! - `db_only`: runs only the database knows (recovery could not settle them) count all the same,
//!   with and without namespaces, and are settled once their files can be written;
//! - `full_disk`: a full disk never turns a run's real status into lost;
//! - `ended_while_down`: a command that ended while no daemon ran is settled with its real status;
//! - `busy_database`: a held write lock slows the daemon down, never makes it start a run twice;
//! - `one_daemon`: a second daemon on the same state directory is refused;
//! - `removed_files`: a running run whose lock file was removed by hand ends `lost` and blocks
//!   nothing;
//! - `orphaned`: a run whose shim died while its command's process group lives on stays active
//!   (not retried beside it) until the group is empty, with the daemon running and across a
//!   restart;
//! - `crashes`: crashes injected at failpoints never start a run twice (a late shim, whether it
//!   arrives before the tombstone or waits at the lock while recovery writes it, never starts);
//! - `soak`: the daemon SIGKILLed again and again while runs flow, then the whole history checked
//!   against these rules.

mod adoption;
mod busy_database;
mod crashes;
mod db_only;
mod ended_while_down;
mod full_disk;
mod moved_back;
mod one_daemon;
mod orphaned;
mod removed_files;
mod soak;
mod unreadable_row;
