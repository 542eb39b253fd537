//! A run's files as its shim left them on disk (`runs/<id>.*`, or an earlier version's folder
//! `runs/<id>/`), read in any layout through the reader recovery and `fleet check` use.

use std::collections::BTreeSet;
use std::path::PathBuf;

use supervisor::shim::runfiles::{list_run_ids, Records, RunFiles};

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

/// The ids of the runs that have files in `f`'s state directory (any layout).
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

/// The path of run `id`'s lock file, which holds its records.
pub fn lock_path(f: &Fleet, id: i64) -> PathBuf {
    RunFiles::new(&f.state_dir(), id).lock_path()
}
