//! Reading fleet's database (`<state dir>/fleet.db`) directly, for what no `fleet` command
//! shows: the daemon row's last write, retry chains, recovery's requeues. Queries only: a test
//! that writes to the database does so itself, in the open, as the scenario it sets up.

use std::collections::BTreeMap;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::Fleet;

impl Fleet {
    /// A read-write connection to the fleet database, waiting up to 30 s on its locks. Panics
    /// if it cannot be opened.
    pub fn db(&self) -> Connection {
        let c = Connection::open(self.state_dir().join("fleet.db")).expect("open fleet.db");
        c.busy_timeout(Duration::from_secs(30)).unwrap();
        c
    }

    /// A read-only connection to the fleet database; `Err` while there is none yet.
    pub fn try_db_read_only(&self) -> rusqlite::Result<Connection> {
        Connection::open_with_flags(
            self.state_dir().join("fleet.db"),
            OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
    }

    /// A read-only connection to the fleet database. Panics if it cannot be opened.
    pub fn db_read_only(&self) -> Connection {
        self.try_db_read_only().expect("open fleet.db read-only")
    }
}

/// The daemon's host row's `updated_at`, which the takeover and every reload rewrite (`fleet
/// status --json` does not show it). Panics if there is no host row.
pub fn daemon_updated_at(f: &Fleet) -> i64 {
    f.db_read_only()
        .query_row(
            "SELECT updated_at FROM hosts ORDER BY epoch DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("read the daemon row")
}

/// run id → the run it retries (`retry_of`, not in `fleet runs --json`).
pub fn retry_of(f: &Fleet) -> BTreeMap<i64, i64> {
    let c = f.db();
    let mut st = c
        .prepare("SELECT id, retry_of FROM runs WHERE retry_of IS NOT NULL")
        .unwrap();
    st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Every time recovery sent a claim back to the queue as never started (an event `starting` →
/// `queued`): the run id, once per such event.
pub fn requeues(f: &Fleet) -> Vec<i64> {
    let c = f.db();
    let mut st = c
        .prepare(
            "SELECT run_id FROM events WHERE from_status = 'starting' AND to_status = 'queued'",
        )
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}
