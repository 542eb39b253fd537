//! Opening a SQLite database for reading only: nothing is created, migrated or written, what a
//! read had to create is removed afterwards unless another connection still uses it, and a
//! database nothing can change is read without creating anything.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use store::*;

const BUSY: Duration = Duration::from_secs(5);

/// A folder holding `fleet.db` with one queued run of project `p`, no connection left open.
fn one_run() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("fleet.db");
    let store = Store::open(&db, BUSY).unwrap();
    enqueue(&store, "p", 1);
    drop(store);
    // The pool's connections close as it drops, the last one removing `-wal` and `-shm`; one
    // its background thread was still opening closes a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while names(tmp.path()) != ["fleet.db"] && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    (tmp, db)
}

/// Queues a run of `project` in namespace `default`, at `now`.
fn enqueue(store: &Store, project: &str, now: i64) {
    store
        .enqueue(
            &NewRun {
                project: project.into(),
                namespace: "default".into(),
                ..Default::default()
            },
            now,
        )
        .unwrap();
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

fn projects(store: &Store) -> Vec<String> {
    store
        .list_runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .map(|r| r.project)
        .collect()
}

#[test]
fn a_read_leaves_no_file_behind_and_changes_nothing() {
    let (tmp, db) = one_run();
    assert_eq!(names(tmp.path()), ["fleet.db"]);
    let before = std::fs::read(&db).unwrap();
    let store = Store::open_read_only(&db, BUSY).unwrap().unwrap();
    assert_eq!(projects(&store), ["p"]);
    let mut probe = store.change_probe().unwrap();
    assert!(probe.changed().unwrap());
    // A write is refused: the store is a reader's.
    assert!(store
        .enqueue(
            &NewRun {
                project: "q".into(),
                namespace: "default".into(),
                ..Default::default()
            },
            2,
        )
        .is_err());
    drop(store);
    // The probe still reads: the files it uses stay until it is closed too.
    assert!(!probe.changed().unwrap());
    drop(probe);
    assert_eq!(names(tmp.path()), ["fleet.db"]);
    assert!(
        std::fs::read(&db).unwrap() == before,
        "fleet.db was written"
    );
}

/// Another connection has the database open (a daemon): its write-ahead log and shared memory
/// stay, and what it writes meanwhile is read.
#[test]
fn the_files_of_a_connection_still_open_stay() {
    let (tmp, db) = one_run();
    let writer = Store::open(&db, BUSY).unwrap();
    let reader = Store::open_read_only(&db, BUSY).unwrap().unwrap();
    enqueue(&writer, "q", 2);
    assert_eq!(projects(&reader), ["q", "p"]);
    drop(reader);
    assert_eq!(
        names(tmp.path()),
        ["fleet.db", "fleet.db-shm", "fleet.db-wal"]
    );
    assert_eq!(projects(&writer), ["q", "p"]);
}

/// A folder nobody may write into (a copy put aside): read as it is, nothing created.
#[test]
fn a_database_nobody_may_change_is_read_creating_nothing() {
    let (tmp, db) = one_run();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let store = Store::open_read_only(&db, BUSY).unwrap().unwrap();
    assert_eq!(projects(&store), ["p"]);
    assert_eq!(names(tmp.path()), ["fleet.db"], "immutable: nothing made");
    drop(store);
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// A copy of a database taken while a daemon ran, with transactions its `-wal` still holds and
/// no `-shm`: read through its log (the file alone would miss them), in a folder anyone may
/// write and in one nobody may; the `-shm` the read had to make is removed after it, the
/// `-wal` it found is left as it was.
#[test]
fn a_copy_with_transactions_in_its_log_is_read_whole() {
    let (_tmp, db) = one_run();
    // Open beside the writer's store, this connection keeps the log from being emptied into
    // the file when the store closes.
    let keep = rusqlite::Connection::open(&db).unwrap();
    // A read joins the log (its `-shm`): until then the connection does not count as one.
    let _: i64 = keep
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    let writer = Store::open(&db, BUSY).unwrap();
    enqueue(&writer, "q", 2);
    drop(writer);
    let copy = tempfile::tempdir().unwrap();
    let copied = copy.path().join("fleet.db");
    std::fs::copy(&db, &copied).unwrap();
    std::fs::copy(
        db.with_file_name("fleet.db-wal"),
        copy.path().join("fleet.db-wal"),
    )
    .unwrap();
    drop(keep);
    assert!(
        std::fs::metadata(copy.path().join("fleet.db-wal"))
            .unwrap()
            .len()
            > 0
    );
    // Root may write anywhere: a folder nobody may write into is still made to hold the
    // `-shm` the read needs.
    let root = rustix::process::geteuid().is_root();
    for mode in [0o700, 0o555] {
        if mode == 0o555 && !root {
            continue;
        }
        std::fs::set_permissions(copy.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        let store = Store::open_read_only(&copied, BUSY).unwrap().unwrap();
        assert_eq!(projects(&store), ["q", "p"], "folder mode {mode:o}");
        drop(store);
        assert_eq!(
            names(copy.path()),
            ["fleet.db", "fleet.db-wal"],
            "folder mode {mode:o}"
        );
    }
    std::fs::set_permissions(copy.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// A path with characters a `file:` URI gives a meaning to is still that path.
#[test]
fn a_path_with_uri_characters_is_read_as_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a?b#c%20d e");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("fleet.db");
    let store = Store::open(&db, BUSY).unwrap();
    enqueue(&store, "p", 1);
    drop(store);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let store = Store::open_read_only(&db, BUSY).unwrap().unwrap();
    assert_eq!(projects(&store), ["p"]);
    drop(store);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// An empty file (made private before any schema was written) is no database yet; one a newer
/// fleet migrated is refused, and left as it was.
#[test]
fn an_empty_file_is_none_and_a_newer_schema_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("fleet.db");
    std::fs::write(&db, "").unwrap();
    assert!(Store::open_read_only(&db, BUSY).unwrap().is_none());
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "nothing written");

    let (_tmp, db) = one_run();
    set_user_version(&db, 999);
    let err = Store::open_read_only(&db, BUSY)
        .err()
        .expect("a newer schema is refused");
    assert!(err.to_string().contains("newer"), "{err}");

    let missing = tmp.path().join("missing.db");
    assert!(Store::open_read_only(&missing, BUSY).is_err());
    assert!(!missing.exists(), "nothing created");
}

/// What only a writer can mend is said at once, in SQLite's words or fleet's: a file that is
/// not a database, and tables under a schema version fleet never writes. Only busy, a
/// reader's I/O error while the file turns to WAL, and a transaction left unfinished are
/// waited for.
#[test]
fn a_file_that_is_not_a_database_or_has_no_version_is_said_at_once() {
    let long = Duration::from_secs(60);
    let tmp = tempfile::tempdir().unwrap();
    let garbage = tmp.path().join("fleet.db");
    std::fs::write(
        &garbage,
        "not a database, whatever its name says\n".repeat(200),
    )
    .unwrap();
    let t = std::time::Instant::now();
    let err = Store::open_read_only(&garbage, long)
        .err()
        .expect("not a database");
    let text = err.to_string();
    assert!(
        text.contains("not a database") && !text.contains("unfinished"),
        "{text}"
    );
    assert!(t.elapsed() < long / 2, "said after {:?}", t.elapsed());

    let (_tmp, db) = one_run();
    set_user_version(&db, 0);
    let err = Store::open_read_only(&db, long)
        .err()
        .expect("tables under version 0");
    assert!(err.to_string().contains("user_version"), "{err}");
}

/// Sets the `PRAGMA user_version` of the database at `db` (no connection open): the header's
/// field, bytes 60 to 63, big-endian.
fn set_user_version(db: &Path, version: u32) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(db).unwrap();
    f.write_all_at(&version.to_be_bytes(), 60).unwrap();
}

/// A read while another process creates the schema sees it whole or not at all: never tables
/// without their schema version (taken for a database another program damaged), whatever the
/// interleaving. Each round races a reader against the first open of a new database.
#[test]
fn a_read_during_the_schema_s_creation_sees_it_whole_or_not_at_all() {
    for round in 0..100 {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("fleet.db");
        // The file exists before the schema does, as the state directory makes it.
        std::fs::write(&db, "").unwrap();
        let go = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                go.wait();
                Store::open(&db, BUSY).unwrap();
            });
            go.wait();
            for _ in 0..20 {
                match Store::open_read_only(&db, BUSY) {
                    Ok(_) => {}
                    Err(e) => panic!("round {round}: a read during the schema's creation: {e}"),
                }
            }
        });
    }
}

/// A copy of the files of a database in rollback-journal mode taken in the middle of a
/// transaction, as a writer killed there leaves them: `fleet.db` with some of the
/// transaction's pages written, and the journal (`fleet.db-journal`) that undoes them. With
/// `committed`, the database held a table before the transaction began; without, nothing.
fn killed_mid_transaction(committed: bool) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live.db");
    let c = rusqlite::Connection::open(&live).unwrap();
    if committed {
        c.execute_batch("CREATE TABLE kept (x); INSERT INTO kept VALUES (1);")
            .unwrap();
    }
    // A cache of a few pages spills the transaction's pages into the file before its commit,
    // the journal written (and synced) first.
    c.execute_batch(
        "PRAGMA cache_size = 2; BEGIN; CREATE TABLE t (x); \
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) \
         INSERT INTO t SELECT randomblob(1000) FROM n;",
    )
    .unwrap();
    let db = tmp.path().join("fleet.db");
    std::fs::copy(&live, &db).unwrap();
    std::fs::copy(
        tmp.path().join("live.db-journal"),
        tmp.path().join("fleet.db-journal"),
    )
    .unwrap();
    drop(c);
    (tmp, db)
}

/// A new database whose first writer was killed while switching it to WAL holds nothing yet
/// (its journal undoes it to an empty file): a read sees no database, as for an empty file,
/// and leaves the journal for a writer to undo. One whose journal undoes to a database with
/// tables cannot be read until a writer has undone it: the read waits for one (a daemon
/// starting undoes it at once), then says so, naming the journal.
#[test]
fn a_transaction_left_unfinished_by_a_killed_writer_is_waited_for_or_named() {
    let (tmp, db) = killed_mid_transaction(false);
    assert!(std::fs::metadata(&db).unwrap().len() > 0, "pages spilled");
    assert!(Store::open_read_only(&db, BUSY).unwrap().is_none());
    assert!(
        tmp.path().join("fleet.db-journal").exists(),
        "left to a writer"
    );

    let (tmp, db) = killed_mid_transaction(true);
    let err = Store::open_read_only(&db, Duration::from_millis(300))
        .err()
        .expect("a journal to undo is not read past");
    let text = err.to_string();
    assert!(
        text.contains("fleet.db-journal") && text.contains("killed"),
        "{text}"
    );
    assert!(tmp.path().join("fleet.db-journal").exists());
    // A writer undoes it: the table committed before is there, the one begun after is not.
    let c = rusqlite::Connection::open(&db).unwrap();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(tables, ["kept"]);
}
