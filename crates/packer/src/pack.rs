//! The [`Packer`] contract every packer keeps, and [`packer_for`], which picks the packer for a set
//! of caps.
//!
//! The contract is stated once, here, so both packers answer to the same rules and the property
//! tests can check them against one oracle. Nothing here may pick runs itself: the choice belongs
//! to the packers in `fallback` and `namespace`.

use crate::{Candidate, Caps, FallbackPacker, NamespacePacker, RunningSet};

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
    /// Every implementation guarantees: no project that is in `running` is picked; at most one
    /// candidate per project is picked, and it is that project's best candidate in
    /// [`queue_order`](crate::queue_order); `running.len()` plus the number picked never exceeds
    /// `caps.global` (and nothing is picked if `running` already fills it).
    fn pack(&self, caps: &Caps, running: &RunningSet, queue: &[Candidate]) -> Vec<Candidate>;
}

/// Picks the packer for `caps`: the [`NamespacePacker`] if `fleet.toml` declares any namespace
/// (`caps.namespaces` non-empty), else the [`FallbackPacker`]. Both read the same merged running
/// set, so which one is chosen never changes what counts as running.
pub fn packer_for(caps: &Caps) -> &'static dyn Packer {
    if caps.namespaces.is_empty() {
        &FallbackPacker
    } else {
        &NamespacePacker
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cand, caps};

    #[test]
    fn packer_for_chooses_by_declared_namespaces() {
        // Distinguish by behaviour: only the namespace packer refuses an unknown namespace.
        let queue = vec![cand(1, "a", "stray", 0)];
        let none = caps(1, &[]);
        let some = caps(1, &[("x", 1, 1)]);
        assert_eq!(
            packer_for(&none)
                .pack(&none, &RunningSet::new(), &queue)
                .len(),
            1
        );
        assert!(packer_for(&some)
            .pack(&some, &RunningSet::new(), &queue)
            .is_empty());
    }
}
