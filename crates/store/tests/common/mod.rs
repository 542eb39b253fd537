//! Fixtures shared by the store's schedule tests: a fresh store taken over by a daemon, and a
//! fire request for project `p`.

#![allow(dead_code)] // each test file uses its own subset

use std::time::Duration;

use store::*;

/// A store in a new temp folder, taken over once: (folder, store, epoch).
pub fn open() -> (tempfile::TempDir, Store, i64) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("fleet.db"), Duration::from_millis(200)).unwrap();
    let epoch = store.take_over(1, "fleet.toml", "{}", 0).unwrap();
    (dir, store, epoch)
}

/// A fire request for project `p` (namespace `default`): `fire` is the occurrence to fire, and
/// the new cursor (0 when none); `expected` the cursor the request was computed from.
pub fn req(expected: Option<Millis>, fire: Option<Millis>, overlap: OverlapPolicy) -> FireRequest {
    FireRequest {
        project: "p".into(),
        namespace: "default".into(),
        timetable: "* * * * * UTC".into(),
        expected_cursor: expected,
        cursor: fire.unwrap_or(0),
        next_fire: None,
        fire,
        skipped: vec![],
        skipped_first: None,
        skipped_count: 0,
        too_late: None,
        overlap,
        max_parallel: 1,
        clock_back_from: None,
    }
}
