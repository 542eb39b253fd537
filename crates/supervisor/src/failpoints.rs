//! The one register of every failpoint in the supervisor — the daemon's, the fork server's and
//! the shim's — each with what recovery does after a crash there. Tests inject crashes by name
//! (`FAILPOINTS=name=return` aborts the process at that point; the cargo feature `failpoints`
//! compiles them in). A unit test keeps this register, the `fail_point!`/`crash_point!` calls in
//! the source and the table in docs/ARCHITECTURE.md in agreement.
//!
//! It imports nothing from the rest of the crate (every other module may read it without a
//! cycle), and must never hold anything but names, their recovery story, and the reading of
//! the `FAILPOINTS` variable.

/// The daemon's failpoints, the fork server's included: (name, what recovery does after a
/// crash there).
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
        "forkserver-after-handover",
        "the fork server handed a request to a shim whose earlier run had ended, the shim took \
         it, and the server died before answering => as after forkserver-after-fork: the \
         daemon starts no second shim for the claim, follows the reused shim through its \
         report pipe and records its real status; shims are exec'd from then on (and the idle \
         shims exit with the server)",
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
        "prune-after-folder-removal",
        "pruning (daemon or fleet prune) removed a batch's run files, not yet their rows => \
         ended runs without files, which fleet check accepts; the next prune forgets them",
    ),
    (
        "spawn-shim-emfile",
        "not a crash: each shim spawn fails with EMFILE (N*return fails N), as when the daemon \
         is out of file descriptors => the run goes back to the queue, same attempt, no hook; \
         no claim is made until a doubling backoff ends; it starts once a spawn succeeds",
    ),
    (
        "recovery-before-apply",
        "recovery decided but wrote nothing => the next recovery decides the same again",
    ),
];

/// The shim's failpoints: (name, what recovery must conclude when the shim crashes there, or,
/// for a failed write, what the shim does about it).
pub const SHIM: &[(&str, &str)] = &[
    (
        "shim-before-lock",
        "no lock taken, nothing written: lock free and no started record for the token \
         => recovery locks, tombstones the token, requeues the same attempt; \
         with a sleep here the late shim must find the tombstone and not start",
    ),
    (
        "shim-after-lock",
        "lock taken (released by the crash), nothing written: lock free and no started record \
         => tombstone the token, requeue the same attempt",
    ),
    (
        "shim-before-started",
        "tombstones checked, started not written: lock free and no started record \
         => tombstone the token, requeue the same attempt",
    ),
    (
        "shim-started-record-fails",
        "not a crash: each attempt at writing the started record fails (N*return fails N), as \
         on a full disk => the shim keeps its lock and retries with backoff, the run stays \
         starting meanwhile; the command starts once the record is durable, the same claim",
    ),
    (
        "shim-started-record-torn",
        "the shim dies half-way through appending the started record (a torn last line): \
         readers skip an incomplete line, so lock free and no started record => tombstone \
         the token, requeue the same attempt; the next shim cuts the torn line off",
    ),
    (
        "shim-after-started",
        "started written, command not yet spawned: lock free, started but no exit record \
         => the command may have started: lost (retried only if retries remain)",
    ),
    (
        "shim-after-exit",
        "command and its process group gone, exit record not written: lock free, started but \
         no exit record => lost",
    ),
    (
        "shim-exit-record-fails",
        "not a crash: each attempt at writing the exit record fails (N*return fails N), as on \
         a full disk => the shim keeps its lock and retries with backoff, the run stays \
         running meanwhile; once the record is durable the run ends with its real status",
    ),
    (
        "shim-exit-record-torn",
        "the shim dies half-way through appending the exit record (a torn last line): \
         lock free, started, no complete exit record => lost",
    ),
    (
        "shim-before-exit-file",
        "command gone, exit record not written: lock free, started but no exit record => lost",
    ),
    (
        "shim-after-exit-file",
        "exit record durable: lock free and exit record for the token \
         => finalize the run with the real status from the exit record",
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
    DAEMON.iter().chain(SHIM.iter()).copied().collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`, subfolders included.
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The failpoint names used under `src/<folder>` (the whole source for ""), each once, as
    /// written after any of `markers`.
    fn names_in(folder: &str, markers: &[&str]) -> BTreeSet<String> {
        let mut files = Vec::new();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src")
            .join(folder);
        sources(&src, &mut files);
        let mut names = BTreeSet::new();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            for marker in markers {
                for part in text.split(marker).skip(1) {
                    names.insert(part.split('"').next().unwrap().to_string());
                }
            }
        }
        names
    }

    /// How a failpoint is written in the source: the fail crate's own macro, and the shim's two
    /// (a crash, a failed write).
    const MARKERS: &[&str] = &["fail_point!(\"", "crash_point!(\"", "io_failpoint!(\""];

    fn names_in_source() -> BTreeSet<String> {
        names_in("", MARKERS)
    }

    /// Register check: a failpoint added to the code without its recovery story (or a register
    /// entry whose failpoint was removed) is refused; no name is registered twice, and every
    /// entry says what recovery does.
    #[test]
    fn register_matches_source() {
        let all = super::all();
        let register: BTreeSet<String> = all.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(register.len(), all.len(), "a failpoint is registered twice");
        assert_eq!(register, names_in_source());
        assert!(
            all.iter().all(|(_, what)| !what.trim().is_empty()),
            "every failpoint says what recovery does after a crash there"
        );
        assert!(
            register.len() >= 12,
            "every crash window of a claim's life has its failpoint: at least twelve"
        );
        // The shim's part of the register is exactly the shim's crash points.
        let shim: BTreeSet<String> = super::SHIM.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            shim,
            names_in("shim", &["crash_point!(\"", "io_failpoint!(\""])
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
