//! `Store::reserve_run_ids`: after it, new runs are numbered above the given id, so that a
//! database restored from an older backup never gives a new run the id (and so the files) of
//! a run of the lost history; and it never moves ids back.

mod common;
use common::Db;

fn new_runs_are_numbered_above_the_reserved_id(db: &Db) {
    let s = db.store();
    // An empty database (as after restoring one from before any run): the next id was 1.
    assert_eq!(s.reserve_run_ids(5).unwrap(), Some(1));
    let first = s.enqueue(&common::new_run("p", "default"), 1).unwrap();
    assert_eq!(first, 6);
    // Ids at or below the next one change nothing, and are not written.
    assert_eq!(s.reserve_run_ids(3).unwrap(), None);
    assert_eq!(s.reserve_run_ids(first).unwrap(), None);
    assert_eq!(s.enqueue(&common::new_run("p", "default"), 1).unwrap(), 7);
    // Ahead of the database again.
    assert_eq!(s.reserve_run_ids(40).unwrap(), Some(8));
    assert_eq!(s.enqueue(&common::new_run("p", "default"), 1).unwrap(), 41);
}

both_backends!(new_runs_are_numbered_above_the_reserved_id);
