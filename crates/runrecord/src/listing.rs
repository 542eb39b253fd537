//! What the names in `<state_dir>/runs/` say about which runs have files there: every run
//! (`fleet check`), the highest ones (a daemon's start, before its first claim) and those whose
//! shim may be alive (recovery). One pass over the folder's names, then the segments' record
//! slots as each question needs them ([`crate::slot`]); what a run's files hold is
//! [`crate::files`]' business.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::names::{LOG_SUFFIX, MORE_SUFFIX, RUNS_DIR};
use crate::slot;

/// The ids of the runs that have files under `<state_dir>/runs/` — anything in their slot of a
/// segment, `<id>.more` or `<id>.log` — ascending, each once. Other entries are skipped; a missing `runs/` means no runs. Reads
/// what every segment holds (its holes skipped): for `fleet check`, which reads every run's
/// records anyway; [`highest_run_ids`] and [`live_run_candidates`] answer their questions
/// with less.
///
/// Errors: I/O errors reading the folder or a segment.
pub fn list_run_ids(state_dir: &Path) -> io::Result<Vec<i64>> {
    let found = RunsDir::read(state_dir)?;
    let mut ids = found.named;
    for (first, path) in &found.segments {
        ids.extend(slot::used_ids(path, *first)?);
    }
    Ok(sorted_once(ids))
}

/// The `limit` highest of [`list_run_ids`], ascending, reading the segments from the highest
/// down only as far as needed: what a daemon reads before its first claim, so that a database
/// restored from an older backup never numbers a new run like one whose files are here.
///
/// Errors: as [`list_run_ids`].
pub fn highest_run_ids(state_dir: &Path, limit: usize) -> io::Result<Vec<i64>> {
    let found = RunsDir::read(state_dir)?;
    let mut ids = found.named;
    let mut from_slots = 0;
    for (first, path) in found.segments.iter().rev() {
        if from_slots >= limit {
            break;
        }
        let top = slot::used_ids_from_top(path, *first, limit - from_slots)?;
        from_slots += top.len();
        ids.extend(top);
    }
    let mut ids = sorted_once(ids);
    let keep = ids.len().saturating_sub(limit);
    Ok(ids.split_off(keep))
}

/// The runs whose shim may be alive here, ascending: every run whose slot's lock someone holds
/// (for the caller to probe again with [`crate::files::RunFiles::is_locked`]). Costs a few
/// lock probes per segment and live shim, never a read of the history: recovery's look for
/// shims the database does not know of.
///
/// Errors: I/O errors reading the folder or probing a segment's locks.
pub fn live_run_candidates(state_dir: &Path) -> io::Result<Vec<i64>> {
    let found = RunsDir::read(state_dir)?;
    let mut ids = Vec::new();
    for (first, path) in &found.segments {
        ids.extend(slot::held_ids(path, *first)?);
    }
    Ok(sorted_once(ids))
}

/// `ids` ascending, each once.
fn sorted_once(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// What the names in `runs/` say (one pass over the folder).
struct RunsDir {
    /// The ids of runs with a file of their own (`<id>.log`, `<id>.more`).
    named: Vec<i64>,
    /// The segments, by first id, ascending.
    segments: Vec<(i64, PathBuf)>,
}

impl RunsDir {
    /// Reads `<state_dir>/runs/` (a missing folder holds nothing). Other entries are skipped.
    fn read(state_dir: &Path) -> io::Result<RunsDir> {
        let runs = state_dir.join(RUNS_DIR);
        let mut found = RunsDir {
            named: Vec::new(),
            segments: Vec::new(),
        };
        let entries = match fs::read_dir(&runs) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(first) = slot::segment_first_id(name) {
                if entry.file_type()?.is_file() {
                    found.segments.push((first, runs.join(name)));
                }
                continue;
            }
            if let Some(id) = name
                .strip_suffix(LOG_SUFFIX)
                .or_else(|| name.strip_suffix(MORE_SUFFIX))
                .and_then(run_id)
            {
                found.named.push(id);
            }
        }
        found.segments.sort_unstable();
        Ok(found)
    }
}

/// The run id a name in `runs/` stands for: a positive integer written as fleet writes it
/// (no sign, no leading zero), else `None` — `-5`, `+7` or `007` are someone else's files.
fn run_id(name: &str) -> Option<i64> {
    let id: i64 = name.parse().ok()?;
    (id > 0 && id.to_string() == name).then_some(id)
}
