//! `Store::reserve_run_ids`: after it, new runs are numbered above the given id, so that a
//! database restored from an older backup never gives a new run the id (and so the files) of
//! a run of the lost history; and it never moves ids back.

use store::{Reserved, MAX_RESERVE_JUMP};

use crate::common;
use crate::common::Db;

fn new_runs_are_numbered_above_the_reserved_id(db: &Db) {
    let s = db.store();
    // An empty database (as after restoring one from before any run): the next id was 1.
    assert_eq!(s.reserve_run_ids(5).unwrap(), Reserved::Moved { from: 1 });
    let first = s.enqueue(&common::new_run("p", "default"), 1).unwrap();
    assert_eq!(first, 6);
    // Ids at or below the next one change nothing, and are not written.
    assert_eq!(s.reserve_run_ids(3).unwrap(), Reserved::Ahead);
    assert_eq!(s.reserve_run_ids(first).unwrap(), Reserved::Ahead);
    assert_eq!(s.enqueue(&common::new_run("p", "default"), 1).unwrap(), 7);
    // Ahead of the database again.
    assert_eq!(s.reserve_run_ids(40).unwrap(), Reserved::Moved { from: 8 });
    assert_eq!(s.enqueue(&common::new_run("p", "default"), 1).unwrap(), 41);
    // A stray file's name far past any backup's lag is not taken: the id range stays usable.
    assert_eq!(
        s.reserve_run_ids(i64::MAX).unwrap(),
        Reserved::TooFar { next: 42 }
    );
    assert_eq!(
        s.reserve_run_ids(41 + MAX_RESERVE_JUMP + 1).unwrap(),
        Reserved::TooFar { next: 42 }
    );
    assert_eq!(s.enqueue(&common::new_run("p", "default"), 1).unwrap(), 42);
}

both_backends!(new_runs_are_numbered_above_the_reserved_id);
