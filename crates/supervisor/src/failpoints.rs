//! The one register of every failpoint in the supervisor — the daemon's, the fork server's and
//! the shim's — each with what recovery does after a crash there.
//!
//! It owns the names, their recovery story and the reading of the `FAILPOINTS` variable, and
//! nothing else. It imports nothing from the rest of the crate, so every other module may read
//! it without a cycle.
//!
//! # What a failpoint is
//!
//! A failpoint names a place where a crash (or a pause, or a failed write) must be survivable.
//! A test makes the process crash there (`std::process::abort`, as abrupt as SIGKILL) or pause.
//! Failpoints are compiled in only with the cargo feature `failpoints` (`cargo build -p fleet
//! --features failpoints`, or any `--all-features` build); without it they compile to nothing,
//! and `FAILPOINTS` is ignored, so they cost nothing in a release build. They are set through
//! the `FAILPOINTS` environment variable, read by the daemon at its start ([`scenario`]), by the
//! fork server once (the shims it forks inherit that), and by each exec'd shim; the shim gets
//! the variable from the daemon's environment and removes it from its command's:
//!
//! ```sh
//! FAILPOINTS=daemon-after-claim=return fleet daemon        # abort right after the first claim
//! FAILPOINTS='shim-before-lock=sleep(3000)' fleet daemon   # every shim waits 3 s before its lock
//! FAILPOINTS=shim-exit-record-fails=3*return fleet daemon  # each exit record fails 3 times first
//! ```
//!
//! In the source a failpoint is a `fail_point!` call (the `fail` crate's), or one of the shim's
//! two macros, `crash_point!` (a crash) and `io_failpoint!` (a write that fails).
//!
//! # What recovery does after a crash at each
//!
//! "Recovery" below means [`crate::settle::settle`], whether it runs in the next daemon's
//! startup recovery or, for a shim that crashed while its daemon lived, in that daemon's reap.
//! Paths are relative to `crates/supervisor/src/`.
//!
//! | failpoint | where | what recovery does after a crash there |
//! | --- | --- | --- |
//! | `daemon-after-claim` | `daemon/spawn.rs`, `spawn`, first thing: the claim is committed, no shim spawned | The run is `starting`, its lock free, no `started` record: recovery locks, tombstones the claim token and requeues the run, same attempt. It is claimed again (new token) and runs once. |
//! | `daemon-after-spawn` | `daemon/spawn.rs`, `spawn`, right after the shim was spawned (forked or exec'd), before its slot is recorded | The shim lives on in its own session. If it holds its lock, recovery adopts the run (and records `running` for a run the database still has as `starting`); if it already ended, recovery finalizes the run from its `exit` record; if it had not yet locked, recovery tombstones and requeues, and the late shim finds the tombstone and does not start. |
//! | `forkserver-after-fork` | `shim/forkserver.rs`, `serve`, the shim is forked, its pid not yet sent to the daemon | The daemon's request ends without an answer, so it cannot know whether a shim exists: it starts no second shim for the claim and follows the report pipe it handed over. The forked shim runs the claim and the run ends once with its real status (had nothing been forked, the pipe's end-of-file and a missing `started` record would requeue it). The fork server is gone, so every later shim is exec'd. |
//! | `forkserver-after-handover` | `shim/forkserver.rs`, `IdleShims::hand_over`, a shim whose run had ended took the request and its report pipe, its pid not yet sent to the daemon | As after `forkserver-after-fork`: no answer, so the daemon starts no second shim for the claim and follows the report pipe; the reused shim runs the claim and the run ends once with its real status. The idle shims exit with the server, and every later shim is exec'd. |
//! | `daemon-before-finalize` | `daemon/eval.rs`, `eval`, in the blocking half after the reap (`daemon/reap.rs`) read the exited shims' files, before [`eval_blocking`](crate::daemon::eval_blocking) writes anything | Nothing was written: the runs are still active in the database. Recovery finds each lock free with an `exit` record and finalizes the run with its real status (queueing a retry if one is due). |
//! | `daemon-after-finalize` | `daemon/eval.rs`, `eval`, after the blocking half returned (transitions and claims committed), before any shim of this EVAL's claims is spawned | Finalized runs stay final. Each run claimed by this EVAL has a free lock and no `started` record: recovery tombstones and requeues it, same attempt. |
//! | `recovery-before-tombstone` | `settle.rs`, `settle`, a claim with no `started` record: the run's lock is held by recovery, the tombstone not yet written | Nothing was written but the segment the lock needed (the crash released the lock). The next recovery finds the same records and decides the same: tombstone, then requeue. |
//! | `recovery-after-tombstone` | `settle.rs`, `settle`, the tombstone is durable, the requeue not yet committed | The run is still `starting` in the database. The next recovery tombstones the same token again (harmless) and requeues; a late shim of that claim finds the tombstone and never starts. |
//! | `prune-after-files-removal` | `prune.rs`, `prune_batch`, the files of a batch of ended runs are removed (each run's record slot last), their rows not yet forgotten (the daemon's prune step, or `fleet prune`) | Nothing to settle: the runs are ended, their rows stay until the next prune, which finds them again (files already gone count as removed) and forgets them. `fleet check` accepts an ended run without its files; `fleet logs` shows it empty. |
//! | `spawn-shim-emfile` | `daemon/spawn.rs`, `spawn`, after the claim, instead of forking or exec'ing the shim (not a crash: the spawn fails with EMFILE; `N*return` fails N spawns) | The run goes back to the queue as never started, same attempt, no failure hook; the daemon logs a warning and claims nothing until a backoff (200 ms doubling to 10 s) ends; the run starts once a spawn succeeds. |
//! | `recovery-before-apply` | `daemon/recover.rs`, `recover`, after the live runs were adopted, before recovery's transitions are queued for the first EVAL | No transition was written (tombstones may have been). The next recovery decides the same for every run: adopt the live ones, finalize, requeue or mark lost the others. |
//! | `shim-before-lock` | `shim/supervise.rs`, `run`, before the run's lock (and before `runs/` or the segment is made) | No lock taken, nothing written: lock free and no `started` record, so recovery tombstones the token and requeues the same attempt. With `sleep(…)` instead of a crash, this is the late-shim trap: the shim, once it locks, finds the tombstone and does not start. |
//! | `shim-after-lock` | `shim/supervise.rs`, `run`, lock taken, before the tombstone check | The crash released the lock; nothing was written: tombstone, requeue, same attempt. |
//! | `shim-before-started` | `shim/supervise.rs`, `run`, tombstones and earlier claims' `started` records checked, `started` not written | Lock free and no `started` record: tombstone, requeue, same attempt. |
//! | `shim-started-record-fails` | `shim/supervise.rs`, `run`, each attempt at writing `started` (not a crash: `N*return` makes the first N attempts fail, as a full disk would) | Nothing to recover: the shim keeps its lock and retries the write with backoff (50 ms doubling to 5 s), the run stays `starting` meanwhile, and the command starts once the record is written, under the same claim. |
//! | `shim-started-record-torn` | `shim/supervise.rs`, `run`: the shim appends the first half of the `started` line to its record slot, then dies (a write cut short) | Readers skip an incomplete last line, so: lock free and no `started` record: tombstone, requeue, same attempt. The next claim's shim cuts the torn line off before it appends. |
//! | `shim-after-started` | `shim/supervise.rs`, `run`, `started` written, command not yet spawned | Lock free, `started` but no `exit`: the command may have started, so the run is `lost`, retried only if the project has retries left. |
//! | `shim-after-exit` | `shim/supervise.rs`, `run`, the command and its process group are gone and reaped, `exit` not written | Lock free, `started` but no `exit`: `lost` (retried if retries remain). |
//! | `shim-exit-record-fails` | `shim/write.rs`, `write_exit`, each attempt at writing `exit` (not a crash: `N*return` fails the first N attempts) | Nothing to recover: the shim keeps its lock and retries the write with backoff, the run stays `running` meanwhile, and once the record is durable the run ends with the command's real status (never `lost`). |
//! | `shim-exit-record-torn` | `shim/write.rs`, `write_exit`: the shim appends the first half of the `exit` line, then dies | Lock free, `started`, no complete `exit`: `lost` (retried if retries remain), never a status read from half a record. |
//! | `shim-before-exit-file` | `shim/write.rs`, `write_exit`, just before the `exit` record is written (also for a command that could not be spawned, or was not started because another claim's `started` record was found) | Lock free, `started` but no `exit`: `lost` (retried if retries remain). |
//! | `shim-after-exit-file` | `shim/write.rs`, `write_exit`, the `exit` record is durable, the lock not yet released by a normal exit | Lock free and an `exit` record for the token: the run is finalized with the real status from the record. |
//!
//! # The register checks itself
//!
//! The unit tests below keep three things equal: the register ([`DAEMON`] and [`SHIM`]), the
//! failpoint calls in the source (a failpoint added without its recovery story, or an entry
//! whose failpoint was removed, fails them), and the table above (read from this very file).
//! The end-to-end failpoint tests crash at each entry and check that recovery settles the run
//! as the table says (docs/TESTING.md).

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
        "prune-after-files-removal",
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

    /// The failpoint names in the rows of a Markdown table written in module docs (`//! | `
    /// then the name in backquotes), each once.
    fn documented_in(source: &str) -> BTreeSet<String> {
        source
            .lines()
            .filter_map(|l| l.strip_prefix("//! | `"))
            .filter_map(|l| l.split('`').next())
            .filter(|n| n.contains('-'))
            .map(String::from)
            .collect()
    }

    /// Register check: every failpoint is documented in this module's table (its `//!` doc), and
    /// the table names no failpoint the register lacks.
    #[test]
    fn register_matches_module_doc() {
        let documented = documented_in(include_str!("failpoints.rs"));
        let register: BTreeSet<String> = super::all().iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            register, documented,
            "the failpoint table in failpoints.rs's module doc is out of step with the register"
        );
    }
}
