//! The auditor behind `fleet check`: the restart-safety checks. It reads the database (runs and the append-only
//! events table) and the run files, and reports every way the promises fleet makes across
//! restarts (docs/ARCHITECTURE.md, "Invariants") can be broken.
//!
//! It only reads. It is safe to run while the daemon runs; a run caught between its claim and
//! its shim taking the lock is given [`STARTING_GRACE_MS`] before it counts as shim-less.
//!
//! It never vouches for what it could not read: a run's lock or record that exists but cannot
//! be read (permission denied, a line that is not a record) is a finding naming the file and
//! line ([`ViolationKind::UnreadableFile`]), and the check goes on with the other files; the
//! database or `runs/` itself unreadable fails the whole check ([`AuditError`]). Only a file
//! that does not exist is an answer. A run's row holding a value fleet cannot read is an
//! `unreadable_row` finding, and the check goes on with the other runs (that run's files are
//! not looked at).
//!
//! Its checks ([`ViolationKind`]: double start, over cap, two active runs of a project past its
//! `max_parallel`, two ends, a run active without a shim and the reverse, run files no row
//! explains, a terminal run whose exit record says another end than the database, cap seats out
//! of step with their runs on a shared database, a slot the running daemon holds for a run that
//! is not active) are several of fleet's invariants written as
//! code: a good place to see what each one means. A double start is judged from both sides: the
//! events (a claim after a claim with no requeue between) and the shims' `started` records (two
//! claims named as starters, or a tombstoned claim that started). Where the run's files are here
//! and name as the one starter the first of those claims, they overrule the events: a run
//! another program queued again while it ran is claimed twice, but its second shim refuses, and
//! it started once. On a shared database it reads every host's events and rows, and the run
//! files of this host's runs only; the claiming host's own cap is not replayed (claim events do
//! not record it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use config::Config;
use runrecord::{list_run_ids, RunFiles, RUNS_DIR};
use store::{Millis, RunId, RunStatus, Store, StoreError};

use crate::statedir::StateDir;

mod files;
mod report;
mod slots;

pub use report::{plain_list, Report, Violation, ViolationKind};

/// Why the audit (`fleet check`) could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The database could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file of the state directory exists but could not be read (or is not a valid record):
    /// nothing can be said about what it holds.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        /// The file or folder.
        path: PathBuf,
        /// What the system said (or why the record is not valid).
        source: std::io::Error,
    },
}

/// Tags an I/O error with the file it concerns.
fn at<T>(path: &Path, result: std::io::Result<T>) -> Result<T, AuditError> {
    result.map_err(|source| AuditError::Unreadable {
        path: path.to_path_buf(),
        source,
    })
}

/// How long a `starting` run may go without a live shim before `check` calls it a violation:
/// the shim is spawned right after the claim commits, but takes a moment to lock.
pub const STARTING_GRACE_MS: Millis = 30_000;

/// Whether `run` was claimed by `host` (this host), or by no named host (a run claimed before
/// hosts existed), or `host` is `None` (SQLite, or this host's name unknown): only such runs'
/// files are on this machine.
fn ran_here(run: &store::Run, host: Option<&str>) -> bool {
    match (run.host.as_deref(), host) {
        (Some(claimer), Some(me)) => claimer == me,
        _ => true,
    }
}

/// Runs every check against one state directory.
/// On a shared database, the events and the database's rows of every host are checked; run
/// files only for this host's runs (they are local).
///
/// Errors: the database cannot be read ([`AuditError::Store`]), or `runs/` exists but cannot be
/// listed ([`AuditError::Unreadable`]). A run's file that cannot be read or parsed is a
/// [`ViolationKind::UnreadableFile`] finding, naming it, and the check goes on: such a file is
/// never taken for a missing one, nor a lock that cannot be probed for a free one.
///
/// `config`, when the config could be read, gives each project's `max_parallel`; without it
/// every project is held to one active run (the default), which can only report too much.
pub fn audit(
    state: &StateDir,
    store: &Store,
    now: Millis,
    config: Option<&Config>,
) -> Result<Report, AuditError> {
    let mut report = Report::default();
    // This host: only its runs' files are here to be checked. SQLite: one state directory
    // is one host, whatever name its runs were claimed under.
    let this_host = match config {
        _ if state.database().is_none() => None,
        Some(c) => Some(c.host.clone()),
        None => state
            .recorded_host()
            .or_else(|| config::machine_hostname().ok()),
    };
    let store::RunRows { runs, unreadable } = store.list_rows(&store::RunFilter::default())?;
    let events = store.events_after(0)?;
    report.runs = runs.len() + unreadable.len();
    // One row fleet cannot read must not stop the check of every other run.
    for bad in &unreadable {
        report.violations.push(Violation {
            kind: ViolationKind::UnreadableRow,
            run_id: Some(bad.id),
            message: format!(
                "{}: nothing about run {} can be checked until its row is fixed",
                bad.error, bad.id
            ),
        });
    }
    let unreadable: BTreeSet<RunId> = unreadable.iter().map(|r| r.id).collect();
    report.events = events.len();

    // From the events: starts, ends and occupancy at every claim.
    let mut runnings: BTreeMap<RunId, usize> = BTreeMap::new();
    let mut ends: BTreeMap<RunId, usize> = BTreeMap::new();
    // A claim not followed by a requeue is a start of the attempt (the command may have run).
    let mut open_claim: BTreeMap<RunId, bool> = BTreeMap::new();
    let mut claims_started: BTreeMap<RunId, usize> = BTreeMap::new();
    // The token of the claim that opened each run's latest unbroken run of claims: the one
    // claim of it that may have started the command, if only one did.
    let mut first_open: BTreeMap<RunId, u64> = BTreeMap::new();
    // Every claim each run was ever claimed under, whichever host made it.
    let mut claims_of: BTreeMap<RunId, BTreeSet<u64>> = BTreeMap::new();
    for ev in &events {
        if ev.to == RunStatus::Starting {
            claims_of
                .entry(ev.run_id)
                .or_default()
                .insert(ev.claim_token);
            if open_claim.get(&ev.run_id) == Some(&true) {
                *claims_started.entry(ev.run_id).or_default() += 1;
            } else {
                first_open.insert(ev.run_id, ev.claim_token);
            }
            open_claim.insert(ev.run_id, true);
            if let (Some(active), Some(cap)) = (ev.global_active, ev.global_cap) {
                if active > cap {
                    report.violations.push(Violation {
                        kind: ViolationKind::OverCap,
                        run_id: Some(ev.run_id),
                        message: format!(
                            "run {} ({}) was claimed with {active} runs active, over the global cap of {cap} (epoch {})",
                            ev.run_id,
                            ev.project,
                            ev.epoch.unwrap_or(0)
                        ),
                    });
                }
            }
            if let (Some(active), Some(cap)) = (ev.namespace_active, ev.namespace_cap) {
                if active > cap {
                    report.violations.push(Violation {
                        kind: ViolationKind::OverCap,
                        run_id: Some(ev.run_id),
                        message: format!(
                            "run {} ({}) was claimed with {active} runs active in namespace {}, over its cap of {cap} (epoch {})",
                            ev.run_id,
                            ev.project,
                            ev.namespace,
                            ev.epoch.unwrap_or(0)
                        ),
                    });
                }
            }
        }
        if ev.from == Some(RunStatus::Starting) && ev.to == RunStatus::Queued {
            open_claim.insert(ev.run_id, false);
        }
        if ev.to == RunStatus::Running {
            *runnings.entry(ev.run_id).or_default() += 1;
        }
        if ev.to.is_terminal() {
            *ends.entry(ev.run_id).or_default() += 1;
        }
    }
    for (run, n) in &runnings {
        if *n > 1 {
            report.violations.push(Violation {
                kind: ViolationKind::DoubleStart,
                run_id: Some(*run),
                message: format!("run {run} was recorded running {n} times in one attempt"),
            });
        }
    }
    for (run, n) in &ends {
        if *n > 1 {
            report.violations.push(Violation {
                kind: ViolationKind::TwoEnds,
                run_id: Some(*run),
                message: format!("run {run} reached a terminal status {n} times"),
            });
        }
    }

    // The cap seats against the runs (a shared database: seats are freed exactly once, by the
    // end of the run that holds them).
    for (run, message) in store.seat_problems()? {
        report.violations.push(Violation {
            kind: ViolationKind::SeatMismatch,
            run_id: Some(run),
            message,
        });
    }

    // The database's running set against the shims' locks.
    let by_id: BTreeMap<RunId, &store::Run> = runs.iter().map(|r| (r.id, r)).collect();
    let mut active_by_project: BTreeMap<&str, Vec<(RunId, u32)>> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.status.is_active()) {
        active_by_project
            .entry(run.project.as_str())
            .or_default()
            .push((run.id, run.seat));
        // Run files are local: another host's active run has its shim there, not here.
        if !ran_here(run, this_host.as_deref()) {
            continue;
        }
        let dir = RunFiles::new(state.root(), run.id);
        let lock = dir.lock_path();
        match files::readable(&mut report, run.id, &lock, dir.is_locked()) {
            Some(false) => {}
            _ => continue,
        }
        let Some(exit) = files::readable(&mut report, run.id, &dir.lock_path(), dir.read_exit())
        else {
            continue;
        };
        let ended = matches!(exit, Some(e) if e.token == run.claim_token);
        if ended {
            report.awaiting_finalize.push(run.id);
            continue;
        }
        // A claim written by a clock that has since stepped back has a negative age: that is
        // no age at all, and must not pass for young for as long as the clock was wrong. A
        // `starting` row with no claim time was not written by a claim (every claim stamps
        // it): it has no age either, and is never young.
        let young = run.status == RunStatus::Starting
            && run
                .started_at
                .is_some_and(|at| now.saturating_sub(at).saturating_abs() < STARTING_GRACE_MS);
        if young {
            continue;
        }
        // What is left of the command, as the daemon would find it (`Fate::Orphaned`): named
        // by the run files, or, when they cannot name it, by the pid the database recorded.
        let records = dir.records().ok();
        let orphaned = crate::settle::leftover_group(
            records.as_ref(),
            run.claim_token,
            crate::settle::recorded_pgid(run),
        );
        if let Some((pgid, _)) = orphaned {
            report.orphaned.push((run.id, pgid));
            continue;
        }
        report.violations.push(Violation {
            kind: ViolationKind::ActiveWithoutShim,
            run_id: Some(run.id),
            message: format!(
                "run {} ({}) is {} in the database but no shim holds its lock and no exit was recorded",
                run.id, run.project, run.status
            ),
        });
    }
    for (project, active) in &active_by_project {
        let limit = config.map_or(1, |c| c.max_parallel(project)) as usize;
        let ids: Vec<RunId> = active.iter().map(|(id, _)| *id).collect();
        let mut seats: Vec<u32> = active.iter().map(|(_, seat)| *seat).collect();
        seats.sort_unstable();
        seats.dedup();
        if ids.len() > limit {
            report.violations.push(Violation {
                kind: ViolationKind::TwoActiveRuns,
                run_id: ids.first().copied(),
                message: format!(
                    "project {project} has {} active runs, more than its max_parallel of {limit}: {}",
                    ids.len(),
                    plain_list(&ids)
                ),
            });
        } else if seats.len() < ids.len() {
            report.violations.push(Violation {
                kind: ViolationKind::TwoActiveRuns,
                run_id: ids.first().copied(),
                message: format!(
                    "project {project} has two active runs on one seat: {}",
                    plain_list(&ids)
                ),
            });
        }
    }
    // The files of a run whose row cannot be read are not looked at: reported above.
    let dirs: BTreeSet<RunId> = at(&state.root().join(RUNS_DIR), list_run_ids(state.root()))?
        .into_iter()
        .filter(|id| !unreadable.contains(id))
        .collect();
    // Files with the id of a run the database says another host ran are not that run's (its
    // files are on that host's disk) — another install's (a state directory that used another
    // database before) — unless they name a claim the run was made under: then this state
    // directory held a claim of it (an earlier claim recovery gave up, the run queued again
    // and claimed elsewhere; or a claim made under an earlier host name), and they are
    // checked as the run's. The others are reported, never read as the run's records.
    let foreign: BTreeMap<RunId, String> = dirs
        .iter()
        .filter_map(|&id| {
            let host = by_id
                .get(&id)
                .filter(|r| r.host.is_some() && !ran_here(r, this_host.as_deref()))
                .and_then(|r| r.host.clone())?;
            let claims = claims_of.get(&id);
            let records = RunFiles::new(state.root(), id).records().ok();
            let ours = records.is_some_and(|r| claims.is_some_and(|c| files::names_a_claim(&r, c)));
            (!ours).then_some((id, host))
        })
        .collect();
    let elsewhere = |id: RunId| foreign.get(&id).cloned();
    report.run_dirs = dirs.len();
    // Runs whose files name exactly one claim that started the command: that claim's token.
    let mut one_start_on_record: BTreeMap<RunId, u64> = BTreeMap::new();
    for &id in &dirs {
        if let Some(host) = elsewhere(id) {
            report.violations.push(Violation {
                kind: ViolationKind::FolderWithoutRun,
                run_id: Some(id),
                message: format!(
                    "run {id}'s files ({}) are here, but the database says host {host} ran run {id}, not this host ({}): \
                     files of another install (this state directory used another database before?) or of this host under an earlier name; \
                     fleet never removes them: move them away or delete them by hand",
                    RunFiles::new(state.root(), id).describe(),
                    this_host.as_deref().unwrap_or("?"),
                ),
            });
            continue;
        }
        // The shims' own record of starts: the ground truth the database may never have seen
        // (a late shim that ignored a tombstone would start the command behind its back).
        let dir = RunFiles::new(state.root(), id);
        let Some(records) = files::records(&mut report, &dir) else {
            continue;
        };
        if let Some(run) = by_id.get(&id).filter(|r| r.status.is_terminal()) {
            files::compare_exit(&mut report, run, &records);
        }
        let Some(started) = records.started else {
            continue;
        };
        let mut tokens = started.history.clone();
        if tokens.is_empty() {
            tokens.push(started.token);
        }
        tokens.sort_unstable();
        tokens.dedup();
        if let [only] = tokens[..] {
            one_start_on_record.insert(id, only);
        }
        if tokens.len() > 1 {
            report.violations.push(Violation {
                kind: ViolationKind::DoubleStart,
                run_id: Some(id),
                message: format!(
                    "run {id}'s command was started by {} claims: {}",
                    tokens.len(),
                    plain_list(&tokens)
                ),
            });
        }
        let tombstones = dir.lock_path();
        for t in tokens {
            if files::readable(&mut report, id, &tombstones, dir.is_tombstoned(t)) == Some(true) {
                report.violations.push(Violation {
                    kind: ViolationKind::DoubleStart,
                    run_id: Some(id),
                    message: format!(
                        "run {id}'s claim {t} was given up by recovery (tombstoned) but its shim started the command"
                    ),
                });
            }
        }
    }
    // A run claimed again with no requeue in between: from the events alone, its first
    // claim may have started the command and the next one started it again. Its files say
    // better when they are here: every claim that starts the command first writes a
    // `started` record naming itself and the claims that started before it. When the one
    // claim on record is the first of those claims, the later ones started nothing (their
    // shims found its start and refused, as after another program queued the running run
    // again). Any other answer — no files, another claim, several — leaves the finding.
    // Only on the host whose files those are: a later claim made by another host had its
    // shim on another disk, where the first claim's `started` record is not.
    for (run, n) in &claims_started {
        if one_start_on_record
            .get(run)
            .is_some_and(|starter| first_open.get(run) == Some(starter))
            && by_id
                .get(run)
                .is_some_and(|r| ran_here(r, this_host.as_deref()))
        {
            continue;
        }
        report.violations.push(Violation {
            kind: ViolationKind::DoubleStart,
            run_id: Some(*run),
            message: format!(
                "run {run} was claimed again {n} time(s) without recovery proving the earlier claim never started"
            ),
        });
    }
    // One window for every suspect of the pass: N lasting violations cost one wait, not N.
    let mut settle_until: Option<Instant> = None;
    for &id in dirs.iter().filter(|id| elsewhere(**id).is_none()) {
        let dir = RunFiles::new(state.root(), id);
        let Some(locked) = files::readable(&mut report, id, &dir.lock_path(), dir.is_locked())
        else {
            continue;
        };
        if !locked {
            // A locked one is reported as a shim without an active run below. What prune
            // leaves of a run with tombstones (for a late shim of a claim given up) is not
            // a run the database lost.
            let leftover = || dir.only_tombstones().unwrap_or(false);
            if !by_id.contains_key(&id) && orphan(store, id)? && !leftover() {
                report.violations.push(Violation {
                    kind: ViolationKind::FolderWithoutRun,
                    run_id: Some(id),
                    message: format!(
                        "run {id}'s files ({}) have no database row ({} restored from an older backup?); \
                         fleet never removes them: check the database, then move them away or delete them by hand \
                         (a record slot: write zeros over its 4 KiB, never remove the segment; see OPERATIONS.md)",
                        dir.describe(),
                        if state.database().is_some() { "the database" } else { "a fleet.db" }
                    ),
                });
            }
            continue;
        }
        // Bad lines were reported above; the started record, if one is valid, still counts.
        let token = dir.records().ok().and_then(|r| r.started).map(|s| s.token);
        let fine = match by_id.get(&id) {
            Some(run) => run.status.is_active() && token.is_none_or(|t| t == run.claim_token),
            None => false,
        };
        if !fine {
            // The rows were read before the locks: a run claimed since, or one whose files
            // prune is removing (it holds the lock for that instant), is not a violation.
            let deadline = *settle_until.get_or_insert_with(|| Instant::now() + SETTLE);
            let Some((what, token)) = still_without_active_run(store, &dir, id, deadline)? else {
                continue;
            };
            report.violations.push(Violation {
                kind: ViolationKind::ShimWithoutActiveRun,
                run_id: Some(id),
                message: format!(
                    "a live shim holds run {id}'s lock (claim {}) but the run is {what}",
                    token.map(|t| t.to_string()).unwrap_or_else(|| "?".into())
                ),
            });
        }
    }
    slots::held_for_nothing(state, store, &mut report)?;
    report.violations.sort_by_key(|v| (v.kind, v.run_id));
    report.violations.dedup();
    Ok(report)
}

/// How long `fleet check` watches a held lock whose run the database does not hold as active
/// before it reports it ([`still_without_active_run`]).
const SETTLE: Duration = Duration::from_secs(1);
/// How often it looks again meanwhile.
const SETTLE_POLL: Duration = Duration::from_millis(20);

/// Whether run `id`'s lock is still held while its row (read again) does not hold the run as
/// active for the claim that started it, looked at again until `deadline` (at most [`SETTLE`]
/// after the pass's first suspect): `None`
/// once they agree or the lock is free (a run claimed after the rows were read; prune holding
/// an ended run's lock while it removes its files), else what to report — the run's status and
/// claim, and the claim of the `started` record.
fn still_without_active_run(
    store: &Store,
    dir: &RunFiles,
    id: RunId,
    deadline: Instant,
) -> Result<Option<(String, Option<u64>)>, AuditError> {
    loop {
        let token = dir.records().ok().and_then(|r| r.started).map(|s| s.token);
        let row = match store.get_run(id) {
            Ok(run) => Some(run),
            Err(store::StoreError::UnknownRun(_)) => None,
            Err(e) => return Err(e.into()),
        };
        let fine = row.as_ref().is_some_and(|run| {
            run.status.is_active() && token.is_none_or(|t| t == run.claim_token)
        });
        if fine || matches!(dir.is_locked(), Ok(false)) {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            let what = match &row {
                Some(run) => format!("{} (claim {})", run.status, run.claim_token),
                None => "unknown to the database".into(),
            };
            return Ok(Some((what, token)));
        }
        std::thread::sleep(SETTLE_POLL);
    }
}

/// Whether run `id` still has no row: a run claimed after the rows were read has its row now.
fn orphan(store: &Store, id: RunId) -> Result<bool, AuditError> {
    match store.get_run(id) {
        Ok(_) => Ok(false),
        Err(store::StoreError::UnknownRun(_)) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod parallel_tests;

#[cfg(test)]
mod tests;
