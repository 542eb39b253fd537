//! A run's files as its shim left them on disk (its record slot in `runs/records-<first id>`,
//! and `runs/<id>.*`), read through the reader recovery and `fleet check` use.

use std::collections::BTreeSet;
use std::path::PathBuf;

use runrecord::{list_run_ids, Records, RunFiles};

use crate::common::Fleet;

/// Run `id`'s newest records. Panics if the files cannot be read or hold a corrupt record (a
/// torn last line, which a shim may be writing at this instant, is no record and no error).
pub fn run_records(f: &Fleet, id: i64) -> Records {
    RunFiles::new(&f.state_dir(), id)
        .records()
        .unwrap_or_else(|e| panic!("run {id}'s records: {e}"))
}

/// Whether run `id` has a complete record of `kind`: `started`, `running` or `exit`.
pub fn has_record(f: &Fleet, id: i64, kind: &str) -> bool {
    let r = run_records(f, id);
    match kind {
        "started" => r.started.is_some(),
        "running" => r.running.is_some(),
        "exit" => r.exit.is_some(),
        other => panic!("no run record is called {other:?}"),
    }
}

/// The ids of the runs that have files in `f`'s state directory.
pub fn run_ids_on_disk(f: &Fleet) -> BTreeSet<i64> {
    list_run_ids(&f.state_dir())
        .unwrap_or_else(|e| panic!("listing runs/: {e}"))
        .into_iter()
        .collect()
}

/// The path of run `id`'s log, where fleet reads it (it may not exist: a command that never
/// wrote has none).
pub fn log_path(f: &Fleet, id: i64) -> PathBuf {
    RunFiles::new(&f.state_dir(), id).log_path()
}

/// The path of the file that holds run `id`'s lock and records: its segment, shared with other
/// runs (see [`slot_used`] for whether it holds anything of this run).
pub fn lock_path(f: &Fleet, id: i64) -> PathBuf {
    RunFiles::new(&f.state_dir(), id).lock_path()
}

/// Whether run `id`'s records hold a tombstone: recovery gave one of its claims up.
pub fn has_tombstone(f: &Fleet, id: i64) -> bool {
    !run_records(f, id).tombstones.is_empty()
}

/// Whether run `id`'s slot holds anything (a record, a tombstone, a torn line).
pub fn slot_used(f: &Fleet, id: i64) -> bool {
    let slot = RunFiles::new(&f.state_dir(), id).record_slot();
    match slot.open(false) {
        Ok(segment) => !slot.read(&segment).unwrap().is_empty(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => panic!("run {id}'s segment: {e}"),
    }
}

/// The text of run `id`'s slot: its record lines as the shim wrote them ("" when empty).
pub fn slot_text(f: &Fleet, id: i64) -> String {
    let slot = RunFiles::new(&f.state_dir(), id).record_slot();
    match slot.open(false) {
        Ok(segment) => String::from_utf8_lossy(&slot.read(&segment).unwrap()).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => panic!("run {id}'s segment: {e}"),
    }
}

/// Replaces what run `id`'s slot holds with `bytes` (zeros after them), as an operator's hand
/// or a damaged disk would: the slot's lock is neither taken nor needed.
pub fn overwrite_slot(f: &Fleet, id: i64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let slot = RunFiles::new(&f.state_dir(), id).record_slot();
    let segment = slot.open(false).unwrap();
    let mut all = bytes.to_vec();
    all.resize(runrecord::SLOT_LEN as usize, 0);
    segment.write_all_at(&all, slot.range().start).unwrap();
}
