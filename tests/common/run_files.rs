//! A run's records as its shim left them on disk (`runs/<id>/`), read in either layout — lines
//! appended to the lock file, or the previous version's file per record — through the reader
//! recovery and `fleet check` use.

use supervisor::shim::rundir::{Records, RunDir};

use crate::common::Fleet;

/// Run `id`'s newest records. Panics if the files cannot be read or hold a corrupt record (a
/// torn last line, which a shim may be writing at this instant, is no record and no error).
pub fn run_records(f: &Fleet, id: i64) -> Records {
    RunDir::new(&f.state_dir(), id)
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
