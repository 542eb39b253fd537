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
const ALL: &[&str] = &[V1, V2, V3, V4, V5, V6];

/// The schema version after every migration ran.
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

/// Version 6: how many runs ended, per project and terminal status, and when the latest did —
/// kept by triggers as runs end (or are inserted already ended, as a skipped occurrence is), so
/// that monitoring reads one row per (project, status) instead of counting the history, and
/// pruning old runs never lowers a total. The first statement counts the history already there.
pub(crate) const V6: &str = r#"
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

/// All migrations, oldest first.
pub(crate) fn migrations() -> Migrations<'static> {
    Migrations::new(ALL.iter().map(|sql| M::up(sql)).collect())
}

#[cfg(test)]
mod tests {
    use crate::ALL_STATUSES;

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
        }
    }
}
