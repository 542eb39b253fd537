//! Pruning ended runs by the retention keys (`keep_runs`, `keep_for`): the database rows (run
//! and events) and the files of each run the policy lets go (`runs/<id>.*`). Used by the daemon (a small
//! step now and then, on a blocking thread) and by `fleet prune` (with or without a daemon).
//!
//! Order, for crash safety: the files go first, under the run's lock (its record slot
//! last); the rows only after. A crash in between leaves a row whose files are gone — an ended
//! run without its log, which `fleet check` accepts (it needs the files of active runs only)
//! and which the next prune forgets. The other order could leave files no row explains. Runs that are queued or
//! active, whose lock a shim holds, that ended in the last [`GRACE`], that a queued or active
//! run refers to (hook, retry, rerun), or that are the newest started run of their project are
//! never touched.
//!
//! On a database shared by many hosts, a host prunes only the runs it ran (and runs no host ran,
//! which have no files): a run's files and its shim's lock are on the disk of the host that
//! ran it, so only that host can remove the files before the row. `keep_runs` still counts
//! the project's runs fleet-wide.
//!
//! Two pruners (the daemon's step and `fleet prune`) never work at once: each batch holds the
//! state directory's `prune.lock` (an exclusive `flock`), so they take turns batch by batch and
//! each selects only what the other has not already let go. Files found already gone (a crash
//! mid-prune, or anything else) count as removed.
//!
//! Deleting rows of ended runs is safe while a daemon runs: nothing in a daemon's memory refers
//! to an ended run, and rows go in short write transactions (at most [`FORGET_CHUNK`] runs),
//! paused between, so a claim waits at most for one of them.

use std::io;
use std::path::Path;
use std::time::Duration;

use config::{Config, Retention};
use runrecord::RunFiles;
use store::{Keep, Millis, PruneCandidate, PrunePolicy, RunId, Store, StoreError};

/// The most runs one batch selects and removes the files of.
pub const BATCH: usize = 200;

/// The most runs one write transaction forgets: a claim waits at most for one such
/// transaction (a few milliseconds).
pub const FORGET_CHUNK: usize = 25;

/// The pause between two forgetting transactions: a claim that found the write lock taken
/// sleeps in SQLite's busy handler, and would keep losing the lock to a pruner that took it
/// again at once.
pub const FORGET_PAUSE: Duration = Duration::from_millis(50);

/// Runs that ended less than this long ago are left for a later prune, whatever the rules say.
pub const GRACE: Duration = Duration::from_secs(5);

/// How many free pages one daemon step gives back to the file system (4 KiB pages: 16 MiB).
pub const RECLAIM_PAGES: u32 = 4096;

/// What went wrong while pruning.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// The database refused (busy past its timeout, or failing).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A run's files could not be removed.
    #[error("{}: {source}{}", path.display(), crate::sys::files::whose(path, source))]
    Files {
        /// The run's segment, `runs/records-<first id>`, which holds its lock and records (its
        /// other files are beside it, in `runs/`).
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// What one prune did (or, dry, would do).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pruned {
    /// The runs this pruner let go (dry run: that would be), oldest first within each project:
    /// their rows are forgotten by this pruner.
    pub runs: Vec<PruneCandidate>,
    /// Runs the policy lets go but whose lock a shim still holds: left for later.
    pub locked: Vec<RunId>,
    /// Runs the policy lets go but whose files could not be removed (a file that cannot be
    /// read or unlinked): left, rows and all, for a later prune; the others go on without them.
    pub failed: Vec<Unremovable>,
}

/// A run whose files a prune could not remove, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unremovable {
    /// The run.
    pub run_id: RunId,
    /// Its segment, `runs/records-<first id>`, which holds its lock and records (its other
    /// files are beside it, in `runs/`).
    pub path: std::path::PathBuf,
    /// The error, in words.
    pub error: String,
}

impl std::fmt::Display for Unremovable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "run {}: cannot remove its files ({}): {}",
            self.run_id,
            self.path.display(),
            self.error
        )
    }
}

/// The policy of `config` at `now` (UTC ms): each project's keys, and the top level's for the
/// runs of projects no longer in the config; on a shared database (`database` set), only the
/// runs `config.host` ran, plus runs that never started.
pub fn policy(config: &Config, now: Millis) -> PrunePolicy {
    let keep = |r: &Retention| Keep {
        newest: r.keep_runs,
        finished_after: r
            .keep_for
            .map(|d| now.saturating_sub(d.as_millis().min(i64::MAX as u128) as i64)),
    };
    PrunePolicy {
        default: keep(&config.retention),
        projects: config
            .projects
            .values()
            .map(|p| (p.name.clone(), keep(&p.retention)))
            .collect(),
        ended_before: now.saturating_sub(GRACE.as_millis() as i64),
        // On a shared database a run's files are on the host that ran it: this host prunes
        // only its own runs (and those no host ran), so that files and row go together.
        host: config.database.as_ref().map(|_| config.host.clone()),
    }
}

/// One batch: up to [`BATCH`] runs `policy` lets go, each one's files removed (under its lock), then
/// their rows forgotten, [`FORGET_CHUNK`] runs per transaction, [`FORGET_PAUSE`] apart. Blocks
/// (sleeps): call it on a blocking thread. `dry_run`: only says which.
///
/// A run whose files cannot be removed is listed in [`Pruned::failed`] and kept, and the batch
/// goes on with the others: one damaged file must not stop all pruning.
///
/// Errors: the database ([`PruneError::Store`]); the pruners' lock file cannot be taken
/// ([`PruneError::Files`]).
pub fn prune_batch(
    state_root: &Path,
    store: &Store,
    policy: &PrunePolicy,
    dry_run: bool,
) -> Result<Pruned, PruneError> {
    let mut out = Pruned::default();
    if dry_run {
        out.runs = store.prune_candidates(policy, BATCH)?;
        return Ok(out);
    }
    let lock_path = state_root.join("prune.lock");
    // Held to the end of the batch: selection, files and rows are one pruner's turn.
    let _turn = take_turn(&lock_path).map_err(|source| PruneError::Files {
        path: lock_path.clone(),
        source,
    })?;
    let candidates = store.prune_candidates(policy, BATCH)?;
    let mut gone: Vec<RunId> = Vec::new();
    for c in candidates {
        let files = RunFiles::new(state_root, c.id);
        match remove_files(&files) {
            Ok(true) => {
                gone.push(c.id);
                out.runs.push(c);
            }
            Ok(false) => out.locked.push(c.id),
            Err(e) => out.failed.push(Unremovable {
                run_id: c.id,
                path: files.lock_path(),
                error: e.to_string(),
            }),
        }
    }
    if !gone.is_empty() {
        // A crash here leaves rows whose files are gone: the next prune forgets them.
        fail::fail_point!("prune-after-files-removal", |_| std::process::abort());
        for (i, chunk) in gone.chunks(FORGET_CHUNK).enumerate() {
            if i > 0 {
                std::thread::sleep(FORGET_PAUSE);
            }
            let forgotten = store.forget_runs(chunk)?;
            if forgotten < chunk.len() {
                // A row changed meanwhile (only another pruner outside this lock could): list
                // only the runs whose rows are really gone.
                let still: Vec<RunId> = chunk
                    .iter()
                    .copied()
                    .filter(|id| store.get_run(*id).is_ok())
                    .collect();
                out.runs.retain(|r| !still.contains(&r.id));
            }
        }
    }
    Ok(out)
}

/// Every batch until nothing more is let go (or, dry, every run that would be). For `fleet
/// prune`. `on_batch` is called with each batch as soon as its rows are forgotten (dry: once,
/// with every run), so that what was done is known even if a later batch fails or the process
/// is killed.
///
/// Runs whose files could not be removed are in [`Pruned::failed`] (each once), the rest pruned.
///
/// Errors: as [`prune_batch`] and whatever `on_batch` returns; what earlier batches did stays
/// done.
pub fn prune_all<E: From<PruneError>>(
    state_root: &Path,
    store: &Store,
    policy: &PrunePolicy,
    dry_run: bool,
    mut on_batch: impl FnMut(&Pruned) -> Result<(), E>,
) -> Result<Pruned, E> {
    if dry_run {
        let all = Pruned {
            runs: store
                .prune_candidates(policy, usize::MAX)
                .map_err(PruneError::from)?,
            ..Pruned::default()
        };
        on_batch(&all)?;
        return Ok(all);
    }
    let mut all = Pruned::default();
    loop {
        let batch = prune_batch(state_root, store, policy, false)?;
        let done = batch.runs.is_empty();
        if !done {
            on_batch(&Pruned {
                runs: batch.runs.clone(),
                ..Pruned::default()
            })?;
        }
        all.runs.extend(batch.runs);
        all.locked.extend(batch.locked);
        for f in batch.failed {
            if !all.failed.iter().any(|g| g.run_id == f.run_id) {
                all.failed.push(f);
            }
        }
        // Only locked or unremovable runs left (or nothing): they stay for a later prune.
        if done {
            break;
        }
    }
    all.locked.sort_unstable();
    all.locked.dedup();
    store.reclaim_space(u32::MAX).map_err(PruneError::from)?;
    Ok(all)
}

/// Takes the pruners' lock at `path` (created 0600 if missing, and then the state directory
/// owner's: `fleet prune` run as root must not lock the daemon's user out of it), waiting while
/// the other pruner holds it (at most one batch).
fn take_turn(path: &Path) -> io::Result<std::fs::File> {
    let file = crate::sys::files::open_or_create(path, 0o600)?;
    crate::sys::files::lock_exclusive(&file)?;
    Ok(file)
}

/// Removes the run's files if no shim holds its lock: `Ok(true)` removed (or already gone),
/// `Ok(false)` a shim holds the lock.
fn remove_files(files: &RunFiles) -> io::Result<bool> {
    if !files.exists()? {
        return Ok(true);
    }
    // Holding the lock while removing: a shim of this run cannot start in between.
    match files.try_lock() {
        Ok(Some(lock)) => files.remove(lock).map(|()| true),
        Ok(None) => Ok(false),
        // Gone between the look and the lock: nothing left to remove.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(e),
    }
}
