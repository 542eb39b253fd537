//! fleet's packers: the decision "which queued runs start now?".
//!
//! A packer is a pure function `(caps, running set, queue) -> runs to start`. This crate does no I/O:
//! no database, no processes, no clock, no async runtime, and it has no dependencies at all. That
//! is deliberate. The supervisor's EVAL
//! gathers its inputs (caps from `fleet.toml`, the running set, the queue), calls a packer, and then
//! applies the decision (claim, spawn). Keeping the decision apart from its effects lets every rule
//! below be checked by property tests over random inputs, and lets a future deterministic simulation
//! drive the same code the daemon runs.
//!
//! # Layout
//!
//! Every public item is re-exported here, so callers write `packer::merge`, never a module path.
//!
//! - `running`: [`RunningSet`] (the active runs grouped by project), [`ActiveRun`], [`RunId`], and
//!   [`merge`], the one running set every packer reads (slot pool and DB running set; DB wins).
//! - `queue`: [`Candidate`] (a queued run) and [`queue_order`] (priority, then FIFO).
//! - `caps`: [`Caps`] (global cap, declared namespaces, each project's `max_parallel`, this host's
//!   rules), [`NamespaceCap`], [`HostRules`] (host capacity, placement), [`DEFAULT_NAMESPACE`].
//! - `pack`: the [`Packer`] contract both packers keep.
//! - `choose`: [`packer_for`], which picks the packer a set of caps calls for.
//! - `fallback`: [`FallbackPacker`], used when no namespace is declared (global cap, queue order).
//! - `namespace`: [`NamespacePacker`], used when namespaces are declared (their caps plus weighted
//!   fair sharing of the global cap).
//!
//! # Why the running set is merged before packing
//!
//! The failure this prevents, "double spawn after restart": a scheduler kept two sources of truth for
//! what is running, the database and an in-memory slot pool. After a restart the pool was empty, and
//! the packer used when no namespaces were configured counted only the pool, so it started again a
//! project the database still recorded as in flight. Here neither packer can see the slot pool on its
//! own: both take a single [`RunningSet`], and the only supported way to build the one the daemon
//! passes is [`merge`], where the DB record wins.

mod caps;
mod choose;
mod fallback;
mod namespace;
mod pack;
mod queue;
mod running;
#[cfg(test)]
mod testing;

pub use caps::{Caps, HostRules, NamespaceCap, DEFAULT_NAMESPACE};
pub use choose::packer_for;
pub use fallback::FallbackPacker;
pub use namespace::NamespacePacker;
pub use pack::Packer;
pub use queue::{queue_order, Candidate};
pub use running::{merge, ActiveRun, RunId, RunningSet};
