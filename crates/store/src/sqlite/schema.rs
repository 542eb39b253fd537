//! The SQLite schema, as an ordered list of migrations (rusqlite_migration keeps the version in
//! SQLite's `user_version`).
//!
//! It owns every table and index definition. Never edit a migration that has shipped (a
//! database already past it would never see the edit); add a new one.

use rusqlite_migration::{Migrations, M};

/// Version 1: runs, the append-only events table, the epoch counter and the daemon's row.
pub(crate) const V1: &str = r#"
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) STRICT;
INSERT INTO meta (key, value) VALUES ('epoch', 0);

-- One row: the daemon that holds (or last held) the state directory, and the config in force.
CREATE TABLE daemon (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    pid           INTEGER NOT NULL,
    epoch         INTEGER NOT NULL,
    started_at    INTEGER NOT NULL,
    config_path   TEXT NOT NULL,
    caps_json     TEXT NOT NULL,
    reload_error  TEXT,
    updated_at    INTEGER NOT NULL
) STRICT;

-- Times are integer milliseconds since the Unix epoch, UTC.
-- AUTOINCREMENT: a run id is never reused, because run files under runs/<id>/ outlive rows.
CREATE TABLE runs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    project          TEXT NOT NULL,
    namespace        TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN
                       ('queued','starting','running','succeeded','failed','timed_out','cancelled','lost')),
    attempt          INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    trigger          TEXT NOT NULL CHECK (trigger IN ('manual','schedule','retry')),
    occurrence       INTEGER,
    priority         INTEGER NOT NULL DEFAULT 0,
    not_before       INTEGER NOT NULL DEFAULT 0,
    enqueued_at      INTEGER NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    pid              INTEGER,
    exit_code        INTEGER,
    signal           INTEGER,
    reason           TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    claim_token      INTEGER NOT NULL DEFAULT 0,
    epoch            INTEGER,
    retry_of         INTEGER REFERENCES runs(id)
) STRICT;

-- fleet's restart guarantees: two active runs of one project cannot even be written.
CREATE UNIQUE INDEX runs_one_active_per_project ON runs (project)
    WHERE status IN ('starting','running');
-- Queue heads: the best queued run of each project, found by index, never by a scan.
CREATE INDEX runs_queue ON runs (project, priority DESC, id) WHERE status = 'queued';
-- Occupancy per namespace, counted inside the claim transaction.
CREATE INDEX runs_active_namespace ON runs (namespace) WHERE status IN ('starting','running');
CREATE INDEX runs_by_project ON runs (project, id);
CREATE INDEX runs_by_status ON runs (status, id);
-- One run per schedule occurrence: "handled" means this row exists.
CREATE UNIQUE INDEX runs_one_per_occurrence ON runs (project, occurrence) WHERE trigger = 'schedule';

-- Append-only: every transition, with the epoch and the occupancy at that moment.
CREATE TABLE events (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        INTEGER NOT NULL,
    at            INTEGER NOT NULL,
    epoch         INTEGER,
    from_status   TEXT,
    to_status     TEXT NOT NULL,
    project       TEXT NOT NULL,
    namespace     TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    claim_token   INTEGER NOT NULL,
    global_active INTEGER,
    global_cap    INTEGER,
    ns_active     INTEGER,
    ns_cap        INTEGER,
    detail        TEXT
) STRICT;
CREATE INDEX events_by_run ON events (run_id, seq);
"#;

/// Every migration's SQL, oldest first.
const ALL: &[&str] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9, QUEUE_HEADS];

/// The schema version after every migration ran.
/// The newest schema version this build knows: the number of migrations, as `user_version`
/// holds it once they have all run.
pub(crate) fn known_version() -> i64 {
    ALL.len() as i64
}

pub(crate) fn latest() -> rusqlite_migration::SchemaVersion {
    rusqlite_migration::SchemaVersion::Inside(
        std::num::NonZeroUsize::new(ALL.len()).expect("at least one migration"),
    )
}

/// Version 2: the persisted cursor of each schedule.
pub(crate) const V2: &str = r#"
-- One row per scheduled project: the last occurrence handled (fired or skipped). The next
-- occurrence is always computed from it, never from "now", so an early or repeated pass cannot
-- make a second run for one slot; the unique index runs_one_per_occurrence is the second guard.
CREATE TABLE schedules (
    project        TEXT PRIMARY KEY,
    timetable      TEXT NOT NULL,
    cursor         INTEGER NOT NULL,
    next_fire      INTEGER,
    skipped_total  INTEGER NOT NULL DEFAULT 0,
    last_skipped   INTEGER,
    updated_at     INTEGER NOT NULL
) STRICT;
"#;

/// Version 3: `Store::next_not_before` (asked at every EVAL) finds the earliest delayed queued
/// run with one seek instead of reading every queued run.
pub(crate) const V3: &str = r#"
CREATE INDEX runs_waiting ON runs (not_before) WHERE status = 'queued';
"#;

/// Version 4: a cancel request keeps its own instant and words, apart from `reason`. The
/// run's end then tells the cancel that stopped it from one that came too late (the command had
/// ended on its own, or ended before the request was seen), and a note written when the run was
/// made is no longer overwritten by the request.
pub(crate) const V4: &str = r#"
ALTER TABLE runs ADD COLUMN cancel_requested_at INTEGER;
ALTER TABLE runs ADD COLUMN cancel_reason TEXT;
"#;

/// Version 5: a schedule's record of the clock found behind its cursor (the clock stepped back
/// since the cursor was written): when that was seen, and the cursor it was behind. The cursor
/// itself then restarts from the clock; this record is what `fleet status` shows of it.
pub(crate) const V5: &str = r#"
ALTER TABLE schedules ADD COLUMN clock_back_at INTEGER;
ALTER TABLE schedules ADD COLUMN clock_back_cursor INTEGER;
"#;

/// Version 6: what a run is asked to run with, and where it came from.
///
/// - `args` and `env`: arguments appended to the project's argv and variables added to its
///   environment for this run alone (JSON array and JSON object of strings; NULL for none).
///   Retries inherit them.
/// - `rerun_of`: the run an operator's rerun repeats; `hook_of`: the failed run an
///   `on_failure` run reports. Triggers `rerun` and `on_failure` join the CHECK.
/// - `seat`: which of a project's parallel seats an active run holds (0 while a project runs one
///   run at a time).
///
/// SQLite cannot change a CHECK constraint in place, so the table is rebuilt. The rebuilt table
/// drops the foreign key of `retry_of`: once ended runs are pruned, a run may outlive the run it
/// retries, and the key would refuse the prune. Ids stay what they were, and the
/// AUTOINCREMENT counter is carried over so that no id is ever handed out twice.
pub(crate) const V6: &str = r#"
CREATE TABLE runs_v6 (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    project             TEXT NOT NULL,
    namespace           TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN
                          ('queued','starting','running','succeeded','failed','timed_out','cancelled','lost')),
    attempt             INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    trigger             TEXT NOT NULL CHECK (trigger IN
                          ('manual','schedule','retry','rerun','on_failure')),
    occurrence          INTEGER,
    priority            INTEGER NOT NULL DEFAULT 0,
    not_before          INTEGER NOT NULL DEFAULT 0,
    enqueued_at         INTEGER NOT NULL,
    started_at          INTEGER,
    finished_at         INTEGER,
    pid                 INTEGER,
    exit_code           INTEGER,
    signal              INTEGER,
    reason              TEXT,
    cancel_requested    INTEGER NOT NULL DEFAULT 0,
    claim_token         INTEGER NOT NULL DEFAULT 0,
    epoch               INTEGER,
    retry_of            INTEGER,
    cancel_requested_at INTEGER,
    cancel_reason       TEXT,
    args                TEXT,
    env                 TEXT,
    rerun_of            INTEGER,
    hook_of             INTEGER,
    seat                INTEGER NOT NULL DEFAULT 0 CHECK (seat >= 0)
) STRICT;
INSERT INTO runs_v6 (id, project, namespace, status, attempt, trigger, occurrence, priority,
    not_before, enqueued_at, started_at, finished_at, pid, exit_code, signal, reason,
    cancel_requested, claim_token, epoch, retry_of, cancel_requested_at, cancel_reason)
SELECT id, project, namespace, status, attempt, trigger, occurrence, priority,
    not_before, enqueued_at, started_at, finished_at, pid, exit_code, signal, reason,
    cancel_requested, claim_token, epoch, retry_of, cancel_requested_at, cancel_reason
FROM runs;
-- The new table's counter starts at its highest id; the old one may be higher still.
UPDATE sqlite_sequence
   SET seq = (SELECT MAX(seq) FROM sqlite_sequence WHERE name IN ('runs', 'runs_v6'))
 WHERE name = 'runs_v6';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'runs_v6', seq FROM sqlite_sequence WHERE name = 'runs'
 AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'runs_v6');
DROP TABLE runs;
ALTER TABLE runs_v6 RENAME TO runs;

CREATE UNIQUE INDEX runs_one_active_per_project ON runs (project, seat)
    WHERE status IN ('starting','running');
CREATE INDEX runs_queue ON runs (project, priority DESC, id) WHERE status = 'queued';
CREATE INDEX runs_active_namespace ON runs (namespace) WHERE status IN ('starting','running');
CREATE INDEX runs_by_project ON runs (project, id);
CREATE INDEX runs_by_status ON runs (status, id);
CREATE UNIQUE INDEX runs_one_per_occurrence ON runs (project, occurrence) WHERE trigger = 'schedule';
CREATE INDEX runs_waiting ON runs (not_before) WHERE status = 'queued';
"#;

/// Version 7: what the operator holds. A row of `paused` holds a project or a namespace: none
/// of its queued runs is claimed and its schedule's occurrences are recorded as skipped, until
/// the row is deleted (`fleet resume`). `since` is milliseconds since the Unix epoch, UTC; `by`
/// says who paused it (the user name the command ran under, if known).
pub(crate) const V7: &str = r#"
CREATE TABLE paused (
    kind  TEXT NOT NULL CHECK (kind IN ('project','namespace')),
    name  TEXT NOT NULL,
    since INTEGER NOT NULL,
    by    TEXT,
    PRIMARY KEY (kind, name)
) STRICT, WITHOUT ROWID;
"#;

/// Version 8: how many runs ended, per project and terminal status, and when the latest did —
/// kept by triggers as runs end (or are written already ended by another program), so
/// that monitoring reads one row per (project, status) instead of counting the history, and
/// pruning old runs never lowers a total. The first statement counts the history already there.
/// A later migration that rebuilds `runs` drops these triggers with it and must create them
/// again (`tests/summary.rs` fails otherwise).
pub(crate) const V8: &str = r#"
CREATE TABLE run_totals (
    project          TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN
                       ('succeeded','failed','timed_out','cancelled','lost')),
    ended            INTEGER NOT NULL,
    last_finished_at INTEGER,
    PRIMARY KEY (project, status)
) STRICT;
INSERT INTO run_totals (project, status, ended, last_finished_at)
    SELECT project, status, count(*), max(finished_at) FROM runs
    WHERE status IN ('succeeded','failed','timed_out','cancelled','lost')
    GROUP BY project, status;
CREATE TRIGGER run_totals_on_end AFTER UPDATE OF status ON runs
    WHEN NEW.status IN ('succeeded','failed','timed_out','cancelled','lost')
     AND OLD.status NOT IN ('succeeded','failed','timed_out','cancelled','lost')
BEGIN
    INSERT INTO run_totals (project, status, ended, last_finished_at)
        VALUES (NEW.project, NEW.status, 1, NEW.finished_at)
        ON CONFLICT (project, status) DO UPDATE SET ended = ended + 1,
            last_finished_at = max(coalesce(last_finished_at, excluded.last_finished_at),
                                   coalesce(excluded.last_finished_at, last_finished_at));
END;
CREATE TRIGGER run_totals_on_insert AFTER INSERT ON runs
    WHEN NEW.status IN ('succeeded','failed','timed_out','cancelled','lost')
BEGIN
    INSERT INTO run_totals (project, status, ended, last_finished_at)
        VALUES (NEW.project, NEW.status, 1, NEW.finished_at)
        ON CONFLICT (project, status) DO UPDATE SET ended = ended + 1,
            last_finished_at = max(coalesce(last_finished_at, excluded.last_finished_at),
                                   coalesce(excluded.last_finished_at, last_finished_at));
END;
"#;

/// The body of a trigger that recomputes the queue head of the project of `NEW` or `OLD` (the
/// literal given): its row deleted, then its first queued run in `runs_queue` order written,
/// if it has one. One seek, forced onto the index (without statistics SQLite could prefer
/// `runs_by_project` and read the project's whole history).
macro_rules! head_of {
    ($row:literal) => {
        concat!(
            "    DELETE FROM queue_heads WHERE project = ",
            $row,
            ".project;\n",
            "    INSERT INTO queue_heads (project, run_id, namespace, priority, not_before)\n",
            "        SELECT project, id, namespace, priority, not_before FROM runs INDEXED BY runs_queue\n",
            "        WHERE status = 'queued' AND project = ",
            $row,
            ".project ORDER BY priority DESC, id LIMIT 1;\n"
        )
    };
}

/// The queue heads: one row per project with queued runs, naming its first queued run in
/// `runs_queue` order (highest priority, then oldest), delayed or not, with what the EVAL needs
/// of it. Kept by triggers in the same transaction as every change to a queued run (insert,
/// delete, and an update of its status, priority, delay, project or namespace), each
/// recomputing the one project's row with one seek in `runs_queue`; so the EVAL reads a few
/// dense pages, one row per project, however long the queue is. The first statements fill
/// it from the queue already there. A later migration that rebuilds `runs` drops these
/// triggers with it and must create them again (`tests/queue_heads.rs` fails otherwise).
pub(crate) const QUEUE_HEADS: &str = concat!(
    r#"
CREATE TABLE queue_heads (
    project    TEXT PRIMARY KEY,
    run_id     INTEGER NOT NULL,
    namespace  TEXT NOT NULL,
    priority   INTEGER NOT NULL,
    not_before INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO queue_heads (project, run_id, namespace, priority, not_before)
    SELECT project, id, namespace, priority, not_before FROM (
        SELECT project, id, namespace, priority, not_before,
               row_number() OVER (PARTITION BY project ORDER BY priority DESC, id) AS n
        FROM runs WHERE status = 'queued')
    WHERE n = 1;
CREATE TRIGGER queue_heads_on_insert AFTER INSERT ON runs
    WHEN NEW.status = 'queued'
BEGIN
"#,
    head_of!("NEW"),
    r#"END;
CREATE TRIGGER queue_heads_on_delete AFTER DELETE ON runs
    WHEN OLD.status = 'queued'
BEGIN
"#,
    head_of!("OLD"),
    r#"END;
CREATE TRIGGER queue_heads_on_update
    AFTER UPDATE OF status, priority, not_before, project, namespace ON runs
    WHEN OLD.status = 'queued' OR NEW.status = 'queued'
BEGIN
"#,
    head_of!("OLD"),
    r#"END;
CREATE TRIGGER queue_heads_on_move AFTER UPDATE OF project ON runs
    WHEN NEW.project <> OLD.project AND (OLD.status = 'queued' OR NEW.status = 'queued')
BEGIN
"#,
    head_of!("NEW"),
    "END;\n"
);

/// Version 9: many hosts (the same tables as PostgreSQL's version 4, so both backends offer one
/// interface; on SQLite one state directory is one host).
/// - `hosts`: one row per host name, holding its epoch (globally unique: every take-over and
///   every forget takes the next value of `meta.epoch`), its heartbeat and what it reports.
///   It takes the place of the one-row `daemon` table, which is left unused.
/// - `runs.host`: the host whose daemon claimed the run.
/// - `published_config`: the config in force for the fleet (one row).
/// - `run_log_tails`: the last bytes of an ended run's log, for `fleet logs` on another host.
pub(crate) const V9: &str = r#"
CREATE TABLE hosts (
    name            TEXT PRIMARY KEY,
    epoch           INTEGER NOT NULL UNIQUE,
    pid             INTEGER NOT NULL,
    started_at      INTEGER NOT NULL,
    heartbeat_at    INTEGER NOT NULL,
    version         TEXT NOT NULL,
    config_version  INTEGER,
    config_digest   TEXT,
    http_addr       TEXT,
    forgotten_at    INTEGER,
    forgotten_by    TEXT,
    forgotten_epoch INTEGER,
    caps_json       TEXT NOT NULL,
    config_path     TEXT NOT NULL,
    reload_error    TEXT,
    updated_at      INTEGER NOT NULL
) STRICT;
ALTER TABLE runs ADD COLUMN host TEXT;
CREATE INDEX runs_active_host ON runs (host) WHERE status IN ('starting','running');
CREATE TABLE published_config (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    version      INTEGER NOT NULL,
    digest       TEXT NOT NULL,
    text         TEXT NOT NULL,
    published_at INTEGER NOT NULL,
    published_by TEXT NOT NULL
) STRICT;
CREATE TABLE run_log_tails (
    run_id INTEGER PRIMARY KEY,
    host   TEXT NOT NULL,
    tail   BLOB NOT NULL,
    cut    INTEGER NOT NULL
) STRICT;
"#;

/// All migrations, oldest first.
pub(crate) fn migrations() -> Migrations<'static> {
    Migrations::new(ALL.iter().map(|sql| M::up(sql)).collect())
}

#[cfg(test)]
mod tests {
    use crate::ALL_STATUSES;
    use rusqlite_migration::{Migrations, M};

    #[test]
    fn migrations_are_valid() {
        super::migrations().validate().unwrap();
    }

    /// Register check: the schema's CHECK constraint lists exactly the statuses of the enum.
    #[test]
    fn schema_lists_every_status() {
        let schema = super::V1;
        for st in ALL_STATUSES {
            assert!(schema.contains(&format!("'{}'", st.as_str())), "{st}");
            assert!(super::V6.contains(&format!("'{}'", st.as_str())), "{st}");
        }
    }

    /// Register check: the schema's CHECK constraint lists exactly the triggers of the enum.
    #[test]
    fn schema_lists_every_trigger() {
        for t in crate::ALL_TRIGGERS {
            assert!(super::V6.contains(&format!("'{}'", t.as_str())), "{t:?}");
        }
    }

    /// A database made by version 5 keeps its runs, ids and id counter through the rebuild of
    /// version 6, and takes the new triggers and columns afterwards.
    #[test]
    fn version_6_keeps_every_run_and_the_id_counter() {
        use rusqlite::Connection;
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        let v5 = Migrations::new(super::ALL[..5].iter().map(|sql| M::up(sql)).collect());
        v5.to_latest(&mut conn).unwrap();
        conn.execute_batch(
            "INSERT INTO runs (id, project, namespace, status, trigger, enqueued_at, reason)
                 VALUES (1, 'a', 'default', 'failed', 'manual', 10, 'exit 3');
             INSERT INTO runs (id, project, namespace, status, attempt, trigger, enqueued_at, retry_of)
                 VALUES (2, 'a', 'default', 'running', 2, 'retry', 20, 1);
             INSERT INTO runs (id, project, namespace, status, trigger, enqueued_at)
                 VALUES (7, 'b', 'default', 'queued', 'manual', 30);
             DELETE FROM runs WHERE id = 7;",
        )
        .unwrap();
        super::migrations().to_latest(&mut conn).unwrap();
        let rows: Vec<(i64, String, Option<i64>, i64)> = conn
            .prepare("SELECT id, status, retry_of, seat FROM runs ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            rows,
            vec![
                (1, "failed".into(), None, 0),
                (2, "running".into(), Some(1), 0)
            ]
        );
        // Id 7 was handed out once: it must never be handed out again.
        conn.execute(
            "INSERT INTO runs (project, namespace, status, trigger, enqueued_at, args)
                 VALUES ('b', 'default', 'queued', 'rerun', 40, '[\"x\"]')",
            [],
        )
        .unwrap();
        assert_eq!(conn.last_insert_rowid(), 8);
        // The one-active-run rule still holds (seat 0 for both).
        let second_active = conn.execute(
            "INSERT INTO runs (project, namespace, status, trigger, enqueued_at)
                 VALUES ('a', 'default', 'starting', 'manual', 50)",
            [],
        );
        assert!(
            second_active.is_err(),
            "two active runs of one project on one seat"
        );
        // A run may now outlive the run it retries.
        conn.execute("DELETE FROM runs WHERE id = 1", []).unwrap();
    }
}
