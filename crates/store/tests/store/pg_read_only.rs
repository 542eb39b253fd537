//! Opening a PostgreSQL database for reading only (that backend alone): the schema is checked,
//! never created nor migrated; nothing can be written through the store; and a role with only
//! `SELECT` on fleet's tables reads through it, change probe included. A role that may read and
//! write the tables but not create any opens a current schema to write.

use std::time::Duration;

use store::*;

const BUSY: Duration = Duration::from_secs(5);

/// A queued run of project `p`.
fn new_run() -> NewRun {
    NewRun {
        project: "p".into(),
        namespace: "default".into(),
        ..Default::default()
    }
}

/// Runs `sql` as the cluster's superuser on `db`.
fn exec(db: &pgtest::Database, sql: &str) {
    postgres::Client::connect(&db.url, postgres::NoTls)
        .unwrap()
        .batch_execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// Whether `db` has a table named `name` (in the superuser's search path).
fn has_table(db: &pgtest::Database, name: &str) -> bool {
    postgres::Client::connect(&db.url, postgres::NoTls)
        .unwrap()
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .unwrap()
        .get(0)
}

/// A role of `db`'s own (roles are the cluster's), logging in with `grants` run for it (each
/// `{role}` replaced by its name); returns the connection string that logs in as it.
fn role(db: &pgtest::Database, suffix: &str, grants: &str) -> String {
    let name = format!("{}_{suffix}", db.name);
    exec(
        db,
        &format!(
            "CREATE ROLE {name} LOGIN; {}",
            grants.replace("{role}", &name)
        ),
    );
    db.url.replace("user=fleet", &format!("user={name}"))
}

/// `db` with fleet's schema and one queued run in it; the writer's store is dropped.
fn migrated() -> Option<(pgtest::Database, RunId)> {
    let db = pgtest::database()?;
    let store = Store::open_postgres(&db.url, BUSY).unwrap();
    let id = store.enqueue(&new_run(), 1).unwrap();
    Some((db, id))
}

#[test]
fn a_read_only_store_reads_and_cannot_write() {
    let Some((db, id)) = migrated() else { return };
    let reader = Store::open_postgres_read_only(&db.url, BUSY).unwrap();
    assert_eq!(reader.get_run(id).unwrap().project, "p");
    assert_eq!(reader.list_runs(&RunFilter::default()).unwrap().len(), 1);
    let mut probe = reader.change_probe().unwrap();
    assert!(probe.changed().unwrap());
    let err = reader.enqueue(&new_run(), 2).unwrap_err().to_string();
    assert!(err.contains("read-only transaction"), "{err}");
    // A change another store commits reaches the reader's probe.
    let writer = Store::open_postgres(&db.url, BUSY).unwrap();
    writer.enqueue(&new_run(), 3).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !probe.changed().unwrap() {
        assert!(std::time::Instant::now() < deadline, "no change notice");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_read_only_open_creates_nothing_and_refuses_a_database_without_the_schema() {
    let Some(db) = pgtest::database() else { return };
    let err = Store::open_postgres_read_only(&db.url, BUSY)
        .err()
        .expect("no schema: refused");
    assert!(
        matches!(err, StoreError::SchemaBehind { found: 0, .. }),
        "{err}"
    );
    let said = err.to_string();
    assert!(
        said.contains("no fleet schema") && said.contains("start a daemon"),
        "{said}"
    );
    assert!(!has_table(&db, "schema_version"), "the read created it");
}

#[test]
fn a_read_only_open_refuses_a_newer_schema() {
    let Some((db, _)) = migrated() else { return };
    exec(&db, "INSERT INTO schema_version (version) VALUES (999)");
    let err = Store::open_postgres_read_only(&db.url, BUSY)
        .err()
        .expect("a newer schema: refused");
    assert!(
        matches!(err, StoreError::SchemaTooNew { found: 999, .. }),
        "{err}"
    );
}

/// A role with `SELECT` only reads through a read-only store, its change probe (`LISTEN`)
/// included; the writer's open works for it too on a current schema (nothing to create), and
/// its write is refused naming the privilege.
#[test]
fn a_role_that_may_only_select_reads_and_is_refused_writes() {
    let Some((db, id)) = migrated() else { return };
    let url = role(
        &db,
        "viewer",
        "GRANT USAGE ON SCHEMA public TO {role}; \
         GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};",
    );
    let reader = Store::open_postgres_read_only(&url, BUSY).unwrap();
    assert_eq!(reader.get_run(id).unwrap().project, "p");
    reader.hosts().unwrap();
    reader.paused().unwrap();
    let mut probe = reader.change_probe().unwrap();
    assert!(probe.changed().unwrap());
    let writer = Store::open_postgres(&url, BUSY).expect("a current schema is only read");
    let err = writer.enqueue(&new_run(), 2).unwrap_err().to_string();
    assert!(err.contains("permission denied for table runs"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

/// A role that may not create tables opens a current schema to write (the migration only
/// reads the version), and is refused, naming the schema, when there is one to create.
#[test]
fn a_role_that_may_not_create_opens_a_current_schema_to_write() {
    let Some(db) = pgtest::database() else { return };
    let url = role(&db, "op", "GRANT USAGE ON SCHEMA public TO {role};");
    let err = Store::open_postgres(&url, BUSY)
        .err()
        .expect("no schema, and no right to create it")
        .to_string();
    assert!(err.contains("permission denied for schema public"), "{err}");
    drop(Store::open_postgres(&db.url, BUSY).unwrap());
    exec(
        &db,
        &format!(
            "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {0}_op; \
             GRANT INSERT ON runs, events, queue_heads TO {0}_op; \
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {0}_op;",
            db.name
        ),
    );
    let store = Store::open_postgres(&url, BUSY).unwrap();
    let id = store.enqueue(&new_run(), 1).unwrap();
    assert_eq!(store.get_run(id).unwrap().project, "p");
}
