-- fleet's SQLite schema, version 1: every table, index and trigger, grouped by table.
-- Times are integer milliseconds since the Unix epoch, UTC. Every table is STRICT: a value of
-- the wrong type is refused, not stored.

-- meta: the store's counters, one row per key. `epoch`: every take-over and every forget of a
-- host takes the next value, so an epoch names one incarnation of one host for good.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) STRICT;
INSERT INTO meta (key, value) VALUES ('epoch', 0);

-- runs: every run, queued, active or ended, until pruned.
-- - AUTOINCREMENT: a run id is never handed out twice, because a run's files outlive its row.
-- - `cancel_requested_at` and `cancel_reason`: a cancel request's own instant and words, kept
--   apart from `reason`, so that the run's end tells the cancel that stopped it from one that
--   came too late (the command had ended on its own, or before the request was seen), and a
--   note written when the run was made is not overwritten by the request.
-- - `args` and `env`: arguments appended to the project's argv and variables added to its
--   environment for this run alone (JSON array and JSON object of strings; NULL for none).
--   Retries inherit them.
-- - `retry_of`: the run a retry repeats; `rerun_of`: the run an operator's rerun repeats;
--   `hook_of`: the failed run an `on_failure` run reports. No foreign key: once ended runs are
--   pruned, a run may outlive the run it names, and a key would refuse the prune.
-- - `seat`: which of its project's parallel seats an active run holds (0 while a project runs
--   one run at a time).
-- - `host`: the host whose daemon claimed the run.
CREATE TABLE runs (
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
    seat                INTEGER NOT NULL DEFAULT 0 CHECK (seat >= 0),
    host                TEXT
) STRICT;
-- fleet's restart guarantee: two active runs of one project on one seat cannot be written.
CREATE UNIQUE INDEX runs_one_active_per_project ON runs (project, seat)
    WHERE status IN ('starting','running');
-- The queued runs of each project in the order they are claimed: a project's first one is
-- found by one seek, never by a scan (`queue_heads` keeps it).
CREATE INDEX runs_queue ON runs (project, priority DESC, id) WHERE status = 'queued';
-- The occupancy of a namespace, counted inside the claim's transaction.
CREATE INDEX runs_active_namespace ON runs (namespace) WHERE status IN ('starting','running');
CREATE INDEX runs_by_project ON runs (project, id);
CREATE INDEX runs_by_status ON runs (status, id);
-- One run per schedule occurrence: "handled" means this row exists.
CREATE UNIQUE INDEX runs_one_per_occurrence ON runs (project, occurrence) WHERE trigger = 'schedule';
-- `Store::next_not_before` (asked at every EVAL) finds the earliest delayed queued run with
-- one seek instead of reading every queued run.
CREATE INDEX runs_waiting ON runs (not_before) WHERE status = 'queued';
-- The runs a host has active: its cap, counted inside the claim, and a forget of the host.
CREATE INDEX runs_active_host ON runs (host) WHERE status IN ('starting','running');

-- events: append-only, every transition of a run, with the epoch and the occupancy at that
-- moment, for `fleet check`.
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

-- schedules: one row per scheduled project, its cursor: the last occurrence handled (fired or
-- skipped). The next occurrence is always computed from it, never from "now", so an early or
-- repeated pass cannot make a second run for one slot; the unique index
-- runs_one_per_occurrence is the second guard. `clock_back_at` and `clock_back_cursor`: when
-- the clock was last found behind the cursor (it stepped back since the cursor was written),
-- and the cursor it was behind; the cursor itself then restarts from the clock, and this record
-- is what `fleet status` shows of it.
CREATE TABLE schedules (
    project           TEXT PRIMARY KEY,
    timetable         TEXT NOT NULL,
    cursor            INTEGER NOT NULL,
    next_fire         INTEGER,
    skipped_total     INTEGER NOT NULL DEFAULT 0,
    last_skipped      INTEGER,
    updated_at        INTEGER NOT NULL,
    clock_back_at     INTEGER,
    clock_back_cursor INTEGER
) STRICT;

-- paused: what the operator holds. A row holds a project or a namespace: none of its queued
-- runs is claimed and its schedule's occurrences are recorded as skipped, until the row is
-- deleted (`fleet resume`). `by` says who paused it (the user name the command ran under, if
-- known).
CREATE TABLE paused (
    kind  TEXT NOT NULL CHECK (kind IN ('project','namespace')),
    name  TEXT NOT NULL,
    since INTEGER NOT NULL,
    by    TEXT,
    PRIMARY KEY (kind, name)
) STRICT, WITHOUT ROWID;

-- run_totals: how many runs ended, per project and terminal status, and when the latest did,
-- so that monitoring reads one row per (project, status) instead of counting the history, and
-- pruning old runs never lowers a total. Kept by the two triggers below, as runs end or are
-- written already ended by another program. A migration that rebuilds `runs` drops these
-- triggers with it and must create them again (`tests/summary.rs` fails otherwise).
CREATE TABLE run_totals (
    project          TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN
                       ('succeeded','failed','timed_out','cancelled','lost')),
    ended            INTEGER NOT NULL,
    last_finished_at INTEGER,
    PRIMARY KEY (project, status)
) STRICT;
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

-- hosts: one row per host name (the same table as PostgreSQL's, so that both backends offer
-- one interface; on SQLite one state directory is one host), holding its epoch, its heartbeat
-- and what it reports. Epochs are globally unique (see `meta`).
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

-- published_config: the config in force for the fleet, one row.
CREATE TABLE published_config (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    version      INTEGER NOT NULL,
    digest       TEXT NOT NULL,
    text         TEXT NOT NULL,
    published_at INTEGER NOT NULL,
    published_by TEXT NOT NULL
) STRICT;

-- run_log_tails: the last bytes of an ended run's log, for `fleet logs` on another host.
CREATE TABLE run_log_tails (
    run_id INTEGER PRIMARY KEY,
    host   TEXT NOT NULL,
    tail   BLOB NOT NULL,
    cut    INTEGER NOT NULL
) STRICT;

-- queue_heads: one row per project with queued runs, naming its first queued run in
-- `runs_queue` order (highest priority, then oldest), delayed or not, with what the EVAL needs
-- of it; so the EVAL reads a few dense pages, one row per project, however long the queue is.
-- Kept by the four triggers below in the same transaction as every change to a queued run
-- (insert, delete, and an update of its status, priority, delay, project or namespace). Each
-- recomputes one project's row: deletes it, then writes the project's first queued run, if it
-- has one, found with one seek forced onto `runs_queue` (without statistics SQLite could prefer
-- `runs_by_project` and read the project's whole history). A migration that rebuilds `runs`
-- drops these triggers with it and must create them again (`tests/queue_heads.rs` fails
-- otherwise).
CREATE TABLE queue_heads (
    project    TEXT PRIMARY KEY,
    run_id     INTEGER NOT NULL,
    namespace  TEXT NOT NULL,
    priority   INTEGER NOT NULL,
    not_before INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TRIGGER queue_heads_on_insert AFTER INSERT ON runs
    WHEN NEW.status = 'queued'
BEGIN
    DELETE FROM queue_heads WHERE project = NEW.project;
    INSERT INTO queue_heads (project, run_id, namespace, priority, not_before)
        SELECT project, id, namespace, priority, not_before FROM runs INDEXED BY runs_queue
        WHERE status = 'queued' AND project = NEW.project ORDER BY priority DESC, id LIMIT 1;
END;
CREATE TRIGGER queue_heads_on_delete AFTER DELETE ON runs
    WHEN OLD.status = 'queued'
BEGIN
    DELETE FROM queue_heads WHERE project = OLD.project;
    INSERT INTO queue_heads (project, run_id, namespace, priority, not_before)
        SELECT project, id, namespace, priority, not_before FROM runs INDEXED BY runs_queue
        WHERE status = 'queued' AND project = OLD.project ORDER BY priority DESC, id LIMIT 1;
END;
CREATE TRIGGER queue_heads_on_update
    AFTER UPDATE OF status, priority, not_before, project, namespace ON runs
    WHEN OLD.status = 'queued' OR NEW.status = 'queued'
BEGIN
    DELETE FROM queue_heads WHERE project = OLD.project;
    INSERT INTO queue_heads (project, run_id, namespace, priority, not_before)
        SELECT project, id, namespace, priority, not_before FROM runs INDEXED BY runs_queue
        WHERE status = 'queued' AND project = OLD.project ORDER BY priority DESC, id LIMIT 1;
END;
-- A run moved to another project: the new project's row too.
CREATE TRIGGER queue_heads_on_move AFTER UPDATE OF project ON runs
    WHEN NEW.project <> OLD.project AND (OLD.status = 'queued' OR NEW.status = 'queued')
BEGIN
    DELETE FROM queue_heads WHERE project = NEW.project;
    INSERT INTO queue_heads (project, run_id, namespace, priority, not_before)
        SELECT project, id, namespace, priority, not_before FROM runs INDEXED BY runs_queue
        WHERE status = 'queued' AND project = NEW.project ORDER BY priority DESC, id LIMIT 1;
END;
