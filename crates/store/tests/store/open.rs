//! Opening a database: several processes (or hosts) opening a new one at once migrate it once
//! and all get a working store; a database migrated by a newer fleet is refused.

use std::sync::Barrier;
use std::time::Duration;

use store::*;

use crate::common::Db;

/// Eight stores open one new database at the same moment: each brings the schema up to date or
/// finds it so, none fails, and they all see one database. Goes red on PostgreSQL without the
/// advisory lock around the migrations (two `CREATE TABLE`s of one table, or two rows of one
/// version).
fn a_new_database_opened_by_several_stores_at_once_is_migrated_once(db: &Db) {
    let start = Barrier::new(8);
    let stores: Vec<Store> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    db.try_store(Duration::from_secs(10))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap().expect("every open succeeds"))
            .collect()
    });
    let id = stores[0]
        .enqueue(
            &NewRun {
                project: "p".into(),
                namespace: "default".into(),
                ..Default::default()
            },
            1,
        )
        .unwrap();
    for s in &stores {
        assert_eq!(s.get_run(id).unwrap().project, "p");
    }
}

/// A database a newer fleet has migrated further than this build knows is refused, never
/// written to.
fn a_database_from_a_newer_fleet_is_refused(db: &Db) {
    drop(db.store());
    db.exec(
        "PRAGMA user_version = 999",
        "INSERT INTO schema_version (version) VALUES (999)",
    );
    let err = db
        .try_store(Duration::from_secs(1))
        .err()
        .expect("a newer schema must be refused");
    if db.is_postgres() {
        assert!(
            matches!(err, StoreError::SchemaTooNew { found: 999, .. }),
            "{err}"
        );
    } else {
        // SQLite names the file, and says why in the words of the PostgreSQL case.
        assert!(matches!(err, StoreError::Open { .. }), "{err}");
        let why = err.to_string();
        assert!(
            why.contains("fleet.db")
                && why.contains("version 999")
                && why.contains("upgrade fleet"),
            "{why}"
        );
    }
}

both_backends!(
    a_new_database_opened_by_several_stores_at_once_is_migrated_once,
    a_database_from_a_newer_fleet_is_refused,
);
