//! The [`Packer`] contract every packer keeps.
//!
//! The contract is stated once, here, so both packers answer to the same rules and the property
//! tests can check them against one oracle. Nothing here may pick runs itself: the choice belongs
//! to the packers in `fallback` and `namespace`.

use crate::{Candidate, Caps, RunningSet};

/// Decides which queued runs to start.
///
/// Implementations are pure: same inputs, same output, no side effects.
pub trait Packer {
    /// Returns the candidates to start now, in the order they should be started.
    ///
    /// `running` must be the merged running set ([`merge`](crate::merge) of the slot pool and the
    /// DB running set), never the slot pool alone, or a restart (empty pool) starts in-flight
    /// projects again. `queue` may be in any order and may hold several candidates of one project.
    ///
    /// Every implementation guarantees: a project's runs in `running` plus its picks never
    /// exceed [`Caps::max_parallel_of`] (so, by default, no project that is in `running` is
    /// picked and at most one candidate per project is); a project's picks are its best
    /// candidates in [`queue_order`](crate::queue_order); `running.len()` plus the number picked never exceeds
    /// `caps.global` (and nothing is picked if `running` already fills it); when the host has a
    /// cap, its runs in `running` ([`RunningSet::count_on`]) plus the number picked never exceed
    /// it; and a project not [placed here](Caps::placed_here) is never picked.
    fn pack(&self, caps: &Caps, running: &RunningSet, queue: &[Candidate]) -> Vec<Candidate>;
}
