//! [`FallbackPacker`], the packer used when `fleet.toml` declares no namespaces: one global cap,
//! queue order.
//!
//! It is the packer a double spawn after restart once came through (its predecessor counted only
//! the slot pool), so it must only ever read the running set it is given, the merged one; it keeps
//! no state of its own between calls.

use crate::queue::heads;
use crate::{Candidate, Caps, Packer, RunningSet};

/// The packer used when `fleet.toml` declares no namespaces: one global cap, queue order.
///
/// It picks, in [`queue_order`](crate::queue_order), the best candidates of each project with a
/// free seat (at most its `max_parallel` minus its active runs; one for a project that declares
/// none and is not running), until the free capacity ([`Caps::free`]: the global cap's, and the
/// host's when it has one) is used up. It ignores namespaces entirely, except
/// that every run in `running` counts against the global cap whatever its namespace.
///
/// This is the kind of packer that causes a double spawn after restart when fed the pool: its
/// predecessor counted only the in-memory slot pool, which is empty after a restart, and so
/// started again a project the database still recorded as in flight. It must be given the
/// merged running set ([`merge`](crate::merge)); the tests
/// `empty_slot_pool_with_db_running_project_is_not_picked_fallback` pin that down.
///
/// Cost: O(Q log Q) for a queue of Q candidates.
#[derive(Clone, Copy, Debug, Default)]
pub struct FallbackPacker;

impl Packer for FallbackPacker {
    fn pack(&self, caps: &Caps, running: &RunningSet, queue: &[Candidate]) -> Vec<Candidate> {
        let free = caps.free(running);
        if free == 0 {
            return Vec::new();
        }
        heads(caps, running, queue)
            .into_iter()
            .take(free)
            .cloned()
            .collect()
    }
}
