//! What the store's tests share: the database each test runs on ([`Db`], one per backend), the
//! macro that makes every test run on both backends ([`both_backends!`]), and the schedule
//! fixtures (a taken-over store, a fire request for project `p`).
//!
//! A test is written once, as a function of `&Db`, and listed in `both_backends!`: it then runs
//! as `sqlite::NAME` and `postgres::NAME`. The PostgreSQL variant gets a fresh database on a
//! cluster the test process starts (crate `pgtest`); where PostgreSQL is not installed it prints
//! a loud SKIPPED line and passes, unless FLEET_REQUIRE_POSTGRES=1 (CI), where it fails.

#![allow(dead_code)] // each test file uses its own subset

use std::time::Duration;

use store::*;

/// The busy timeout tests open their stores with: short, so the busy test is quick.
pub const BUSY: Duration = Duration::from_millis(200);

/// One test's database, on one backend.
pub enum Db {
    /// A SQLite file in a temp folder of its own.
    Sqlite(tempfile::TempDir),
    /// A fresh database on this process's PostgreSQL test cluster.
    Postgres(pgtest::Database),
}

impl Db {
    /// A new SQLite database in a new temp folder.
    pub fn sqlite() -> Db {
        Db::Sqlite(tempfile::tempdir().unwrap())
    }

    /// A new PostgreSQL database, or `None` when PostgreSQL is not installed (see `pgtest`).
    pub fn postgres() -> Option<Db> {
        pgtest::database().map(Db::Postgres)
    }

    /// True on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self, Db::Postgres(_))
    }

    /// A new `Store` on this database, with a pool of its own: several of them are several
    /// processes (or hosts) sharing one database.
    pub fn store(&self) -> Store {
        self.store_with(BUSY)
    }

    /// [`Db::store`] with the given busy timeout.
    pub fn store_with(&self, busy: Duration) -> Store {
        self.try_store(busy).unwrap()
    }

    /// Opens a new `Store` on this database, or the error opening it.
    pub fn try_store(&self, busy: Duration) -> Result<Store, StoreError> {
        match self {
            Db::Sqlite(dir) => Store::open(&dir.path().join("fleet.db"), busy),
            Db::Postgres(db) => Store::open_postgres(&db.url, busy),
        }
    }

    /// Runs SQL on a plain connection, as another program would: `sqlite` on SQLite,
    /// `postgres` on PostgreSQL.
    pub fn exec(&self, sqlite: &str, postgres: &str) {
        match self {
            Db::Sqlite(dir) => rusqlite::Connection::open(dir.path().join("fleet.db"))
                .unwrap()
                .execute_batch(sqlite)
                .unwrap(),
            Db::Postgres(db) => postgres::Client::connect(&db.url, postgres::NoTls)
                .unwrap()
                .batch_execute(postgres)
                .unwrap(),
        }
    }

    /// The one integer `postgres` reads on a plain PostgreSQL connection; `None` on SQLite.
    #[allow(dead_code)]
    pub fn pg_count(&self, postgres: &str) -> Option<i64> {
        match self {
            Db::Sqlite(_) => None,
            Db::Postgres(db) => Some(
                postgres::Client::connect(&db.url, postgres::NoTls)
                    .unwrap()
                    .query_one(postgres, &[])
                    .unwrap()
                    .get(0),
            ),
        }
    }

    /// The one integer `sql` reads on a plain connection, on either backend.
    #[allow(dead_code)]
    pub fn count(&self, sql: &str) -> i64 {
        match self {
            Db::Sqlite(dir) => rusqlite::Connection::open(dir.path().join("fleet.db"))
                .unwrap()
                .query_row(sql, [], |r| r.get(0))
                .unwrap(),
            Db::Postgres(_) => self.pg_count(sql).unwrap(),
        }
    }

    /// [`Db::exec`], handing back the database's refusal instead of panicking on it.
    pub fn try_exec(&self, sqlite: &str, postgres: &str) -> Result<(), String> {
        match self {
            Db::Sqlite(dir) => rusqlite::Connection::open(dir.path().join("fleet.db"))
                .unwrap()
                .execute_batch(sqlite)
                .map_err(|e| e.to_string()),
            Db::Postgres(db) => postgres::Client::connect(&db.url, postgres::NoTls)
                .unwrap()
                .batch_execute(postgres)
                .map_err(|e| e.to_string()),
        }
    }

    /// Another connection takes the lock every claim needs and holds it until the returned
    /// holder is released: SQLite's write lock (`BEGIN IMMEDIATE`); on PostgreSQL the hosts'
    /// rows (`FOR UPDATE`), which every fenced write reads `FOR SHARE`.
    pub fn hold_write_lock(&self) -> LockHolder {
        match self {
            Db::Sqlite(dir) => {
                let c = rusqlite::Connection::open(dir.path().join("fleet.db")).unwrap();
                c.execute_batch("BEGIN IMMEDIATE").unwrap();
                LockHolder::Sqlite(c)
            }
            Db::Postgres(db) => {
                let mut c = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
                c.batch_execute("BEGIN; SELECT name FROM hosts FOR UPDATE")
                    .unwrap();
                LockHolder::Postgres(c)
            }
        }
    }
}

/// A connection holding the write lock (see [`Db::hold_write_lock`]).
pub enum LockHolder {
    /// SQLite, inside `BEGIN IMMEDIATE`.
    Sqlite(rusqlite::Connection),
    /// PostgreSQL, inside a transaction holding the hosts' rows.
    Postgres(postgres::Client),
}

impl LockHolder {
    /// Ends the holder's transaction (committing nothing of note), releasing the lock.
    pub fn release(self) {
        match self {
            LockHolder::Sqlite(c) => c.execute_batch("COMMIT").unwrap(),
            LockHolder::Postgres(mut c) => c.batch_execute("COMMIT").unwrap(),
        }
    }
}

/// Makes each listed test function (`fn NAME(db: &Db)`) run on both backends: `sqlite::NAME`
/// and `postgres::NAME`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(&$crate::common::Db::sqlite());
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(db) = $crate::common::Db::postgres() {
                        super::$name(&db);
                    }
                }
            )*
        }
    };
}

/// A store on `db`, taken over once: (store, epoch).
pub fn open(db: &Db) -> (Store, i64) {
    let store = db.store();
    let epoch = store.take_over("local", 1, "fleet.toml", "{}", 0).unwrap();
    (store, epoch)
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
        skipped_count_at_least: false,
        too_late: None,
        overlap,
        max_parallel: 1,
        clock_back_from: None,
    }
}

/// A manual run of `project` in namespace `ns`, the rest default.
#[allow(dead_code)]
pub fn new_run(project: &str, ns: &str) -> NewRun {
    NewRun {
        project: project.into(),
        namespace: ns.into(),
        ..Default::default()
    }
}

/// A claim of run `id` in namespace `ns` under a global cap of 4, one run per project.
#[allow(dead_code)]
pub fn claim_req(id: RunId, ns: &str) -> ClaimRequest {
    ClaimRequest {
        run_id: id,
        namespace: ns.into(),
        global_cap: 4,
        namespace_cap: None,
        max_parallel: 1,
        host_cap: None,
        config_version: None,
    }
}

/// Takes the database over as a daemon would; returns the new epoch.
#[allow(dead_code)]
pub fn take_over(s: &Store) -> i64 {
    s.take_over(
        "local",
        std::process::id() as i32,
        "fleet.toml",
        "{}",
        now_ms(),
    )
    .unwrap()
}

/// The transition that ends `run`'s current claim `succeeded` (exit 0).
#[allow(dead_code)]
pub fn succeeded(run: &Run) -> Transition {
    Transition {
        run_id: run.id,
        token: run.claim_token,
        change: Change::Finish {
            status: RunStatus::Succeeded,
            exit_code: Some(0),
            signal: None,
            reason: None,
            retry: None,
            finished_at: None,
        },
    }
}
