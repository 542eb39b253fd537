//! The backend-neutral rules of the claim: which caps a claim request must find room under
//! ([`caps`]), and which of its project's seats a run takes ([`lowest_free_seat`]).
//!
//! A backend enforces them with its own mechanism (SQLite counts active runs under its one
//! write lock; PostgreSQL takes a row per cap seat, since its claims can race), but the list of
//! caps comes from here: a new kind of cap is added to [`CapKind`] and [`caps`] once, and each
//! backend then only learns to count (or seat) that kind. Nothing here may read or write.

use crate::ClaimRequest;

/// A kind of cap a claim must find room under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum CapKind {
    /// The install-wide cap (`max_concurrency`); its name is empty.
    Global,
    /// A namespace's cap; its name is the namespace's.
    Namespace,
    /// A host's own capacity; its name is the host's. Counted over that host's active runs.
    Host,
}

impl CapKind {
    /// The kind as stored (PostgreSQL's `cap_seats.kind`) and logged.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CapKind::Global => "global",
            CapKind::Namespace => "namespace",
            CapKind::Host => "host",
        }
    }
}

/// One cap a claim must find room under: at most `cap` active runs of its (`kind`, `name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cap<'a> {
    /// What it caps.
    pub(crate) kind: CapKind,
    /// Which one of that kind ("" for the global cap).
    pub(crate) name: &'a str,
    /// How many active runs it allows.
    pub(crate) cap: u32,
}

/// The caps `req` carries, global first, then its namespace's, then the claiming `host`'s own
/// capacity: a claim that finds any of them full claims nothing, so that no cap is exceeded
/// whatever a packer decided.
pub(crate) fn caps<'a>(req: &'a ClaimRequest, host: &'a str) -> Vec<Cap<'a>> {
    let global = Cap {
        kind: CapKind::Global,
        name: "",
        cap: req.global_cap,
    };
    let namespace = req.namespace_cap.map(|cap| Cap {
        kind: CapKind::Namespace,
        name: &req.namespace,
        cap,
    });
    let own = req.host_cap.map(|cap| Cap {
        kind: CapKind::Host,
        name: host,
        cap,
    });
    std::iter::once(global)
        .chain(namespace)
        .chain(own)
        .collect()
}

/// Whether a claim packed with config version `ours` may claim while `published` (0: nothing
/// published) is in force: only when they are the same, so that every claim counts against the
/// caps of the version in force. `None` (a claimer that follows no published config) always may.
pub(crate) fn stale_config(ours: Option<i64>, published: i64) -> Option<crate::StoreError> {
    match ours {
        Some(ours) if ours != published => Some(crate::StoreError::StaleConfig { ours, published }),
        _ => None,
    }
}

/// The lowest seat number below `max_parallel` missing from `taken` (the seats the project's
/// active runs hold, in ascending order); `None` when all are taken (or `max_parallel` is 0),
/// and the claim then claims nothing.
pub(crate) fn lowest_free_seat(
    taken: impl IntoIterator<Item = u32>,
    max_parallel: u32,
) -> Option<u32> {
    let mut seat = 0u32;
    for t in taken {
        if t == seat {
            seat += 1;
        } else if t > seat {
            break;
        }
    }
    (seat < max_parallel).then_some(seat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_gap_is_the_seat() {
        assert_eq!(lowest_free_seat([0, 1, 3], 4), Some(2));
        assert_eq!(lowest_free_seat([], 1), Some(0));
        assert_eq!(lowest_free_seat([0, 1], 2), None);
        assert_eq!(lowest_free_seat([], 0), None);
    }

    #[test]
    fn a_request_carries_the_global_cap_and_its_namespace_cap() {
        let mut req = ClaimRequest {
            run_id: 1,
            namespace: "ops".into(),
            global_cap: 8,
            namespace_cap: None,
            max_parallel: 1,
            host_cap: None,
            config_version: None,
        };
        assert_eq!(caps(&req, "a").len(), 1);
        req.namespace_cap = Some(2);
        req.host_cap = Some(3);
        let c = caps(&req, "a");
        assert_eq!(c[2].kind, CapKind::Host);
        assert_eq!(c[2].name, "a");
        assert_eq!(
            c[1],
            Cap {
                kind: CapKind::Namespace,
                name: "ops",
                cap: 2
            }
        );
        assert_eq!(c[0].kind, CapKind::Global);
    }
}
