//! The register of every failpoint in the supervisor, with what recovery does after a crash
//! there. Tests inject crashes by name (`FAILPOINTS=name=return` aborts the process at that
//! point; the cargo feature `failpoints` compiles them in). A unit test keeps this register, the
//! `fail_point!` calls in the source and the table in docs/ARCHITECTURE.md in agreement.

/// The daemon's failpoints (the shim's are in [`crate::shim::FAILPOINTS`]).
pub const DAEMON: &[(&str, &str)] = &[
    (
        "daemon-after-claim",
        "the claim is committed, no shim spawned: lock free and no started record => \
         recovery tombstones the claim and requeues the run, same attempt",
    ),
    (
        "daemon-after-spawn",
        "the shim is spawned, the daemon dies: the shim lives on in its own session => \
         recovery finds its lock held and adopts the run (or finalizes it from its exit record)",
    ),
    (
        "forkserver-after-fork",
        "the fork server forked a shim and died before answering => the daemon does not know \
         the shim's pid, starts no second shim for the claim, follows the shim through its \
         report pipe and records its real status; shims are exec'd from then on",
    ),
    (
        "daemon-before-finalize",
        "a shim's exit was read but not written to the database => recovery finds the lock free \
         and the exit record, and finalizes the run with its real status",
    ),
    (
        "daemon-after-finalize",
        "transitions and claims of this EVAL are committed, no shim of its claims spawned => \
         finalized runs stay final; claimed runs are requeued as never started",
    ),
    (
        "recovery-before-tombstone",
        "settling a claim whose command never started, before the tombstone => the next \
         recovery finds the same state and decides the same (tombstone, requeue)",
    ),
    (
        "recovery-after-tombstone",
        "tombstone written, requeue not yet committed => the next recovery writes the \
         tombstone again (idempotent) and requeues; a late shim of that claim never starts",
    ),
    (
        "recovery-before-apply",
        "recovery decided but wrote nothing => the next recovery decides the same again",
    ),
];

/// Reads `FAILPOINTS` when failpoints are compiled in (feature `failpoints`); without them it
/// reads nothing, so a production binary never reacts to the variable. `Err` if the variable is
/// malformed (the fail crate panics on that; the panic is caught so the caller reports it).
pub fn scenario() -> Result<Option<fail::FailScenario<'static>>, MalformedFailpoints> {
    if !fail::has_failpoints() {
        return Ok(None);
    }
    std::panic::catch_unwind(fail::FailScenario::setup)
        .map(Some)
        .map_err(|_| MalformedFailpoints)
}

/// `FAILPOINTS` could not be parsed (expected `name=action;name=action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("FAILPOINTS is malformed (expected name=action;name=action)")]
pub struct MalformedFailpoints;

/// Every failpoint, daemon's then shim's: (name, what recovery does after a crash there).
pub fn all() -> Vec<(&'static str, &'static str)> {
    DAEMON
        .iter()
        .chain(crate::shim::FAILPOINTS.iter())
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    fn names_in_source() -> BTreeSet<String> {
        let mut pending = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        let mut files = Vec::new();
        // Modules may be folders (src/daemon/, src/schedule/): walk them all.
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        let mut names = BTreeSet::new();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            for marker in ["fail_point!(\"", "crash_point!(\""] {
                for part in text.split(marker).skip(1) {
                    names.insert(part.split('"').next().unwrap().to_string());
                }
            }
        }
        names
    }

    /// Register check: a failpoint added to the code without its recovery story (or a register
    /// entry whose failpoint was removed) is refused.
    #[test]
    fn register_matches_source() {
        let register: BTreeSet<String> = super::all().iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(register, names_in_source());
        assert!(
            register.len() >= 12,
            "the restart contract asks for at least twelve"
        );
    }

    /// Register check: every failpoint is documented in docs/ARCHITECTURE.md's table.
    #[test]
    fn register_matches_architecture_doc() {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ARCHITECTURE.md");
        let text = std::fs::read_to_string(&doc).unwrap();
        let documented: BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .filter(|n| n.contains('-'))
            .map(String::from)
            .collect();
        let register: BTreeSet<String> = super::all().iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            register, documented,
            "docs/ARCHITECTURE.md's failpoint table is out of step"
        );
    }
}
