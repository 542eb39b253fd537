//! [`packer_for`]: which packer a set of caps calls for.
//!
//! Kept apart from the [`Packer`] contract so that the contract depends on no packer and each
//! packer depends only on the contract: the choice is the one place that knows them all. It must
//! never pick runs itself.

use crate::{Caps, FallbackPacker, NamespacePacker, Packer};

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
    use crate::RunningSet;

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
