//! The concurrency caps a packer obeys: [`Caps`] (the global cap, the declared namespaces,
//! each project's `max_parallel` and the rules of the host the packer decides for),
//! [`NamespaceCap`], [`HostRules`], and [`DEFAULT_NAMESPACE`], the namespace of a project that
//! declares none.
//!
//! These are plain values, filled in by the supervisor from `fleet.toml`; this module never reads
//! a file and never checks a run against a cap (the packers do).

use std::collections::{BTreeMap, BTreeSet};

use crate::RunningSet;

/// The namespace of a project that declares none in `fleet.toml`.
///
/// It needs no entry in [`Caps::namespaces`]: without one it is capped by the global cap alone and
/// has weight 1 (see [`NamespacePacker`](crate::NamespacePacker)).
pub const DEFAULT_NAMESPACE: &str = "default";

/// The caps of one namespace declared in `fleet.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceCap {
    /// At most this many runs counted against the namespace may be active at once (runs, not
    /// processes; 0 stops the namespace from starting anything).
    pub max_concurrency: usize,
    /// Its share of the global cap when the global cap binds, relative to the other namespaces'
    /// weights. Must be at least 1; the packer treats 0 as 1 rather than starve the namespace.
    pub weight: u32,
}

/// The concurrency caps, as declared in `fleet.toml`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// At most this many runs may be active at once, over all namespaces.
    pub global: usize,
    /// The declared namespaces, by name. Empty means "no namespaces declared", which selects the
    /// [`FallbackPacker`](crate::FallbackPacker) (see [`packer_for`](crate::packer_for)).
    pub namespaces: BTreeMap<String, NamespaceCap>,
    /// Projects that may have more than one active run at once (`max_parallel` in `fleet.toml`),
    /// by name, with their limit. A project absent from the map runs one at a time; see
    /// [`Caps::max_parallel_of`].
    pub max_parallel: BTreeMap<String, usize>,
    /// The rules of the host this packing is for: its own capacity and the projects placed
    /// elsewhere. The default has neither (one host, no placement).
    pub host: HostRules,
}

/// What a packing owes the one host it decides for (`[hosts.NAME]` and the projects' `hosts`
/// lists in `fleet.toml`, seen from that host).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostRules {
    /// The host's name: the runs of the running set whose [`ActiveRun::host`](crate::ActiveRun::host)
    /// is this name (or `None`) are the ones its capacity counts.
    pub name: String,
    /// At most this many runs may be active on this host at once (`[hosts.NAME]
    /// max_concurrency`); `None`: the host has no cap of its own. 0 starts nothing here.
    pub max_concurrency: Option<usize>,
    /// Projects placed only on other hosts (`hosts = [...]` without this one): never picked
    /// here, whatever capacity is free, so that a job pinned to a machine never runs elsewhere.
    pub placed_elsewhere: BTreeSet<String>,
}

impl Caps {
    /// How many runs of `project` may be active at once: its entry in
    /// [`Caps::max_parallel`], else 1. An entry of 0 stops the project from starting anything.
    pub fn max_parallel_of(&self, project: &str) -> usize {
        self.max_parallel.get(project).copied().unwrap_or(1)
    }

    /// How many more runs may start now: the free global capacity (`global` minus every run in
    /// `running`) and, when the host has a cap, no more than its free capacity (its cap minus
    /// the runs of `running` on this host), both saturating. Every packer stops there.
    pub fn free(&self, running: &RunningSet) -> usize {
        let global = self.global.saturating_sub(running.len());
        match self.host.max_concurrency {
            Some(cap) => global.min(cap.saturating_sub(running.count_on(&self.host.name))),
            None => global,
        }
    }

    /// Whether `project` may start on this host: not placed only on other hosts.
    pub fn placed_here(&self, project: &str) -> bool {
        !self.host.placed_elsewhere.contains(project)
    }
}
