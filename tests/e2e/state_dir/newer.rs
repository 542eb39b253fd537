//! A database a newer fleet has migrated is refused, not written to: every command and the
//! daemon name the file and say to upgrade, exit 2 (bad input: this binary cannot use it),
//! and the database keeps its version and its rows.

use crate::common::*;

#[test]
fn a_database_from_a_newer_fleet_is_refused_by_commands_and_the_daemon() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    f.cmd_ok(&["enqueue", "p"]);
    let known: i64 = f
        .db()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    f.db().execute_batch("PRAGMA user_version = 999").unwrap();

    for args in [
        &["daemon"][..],
        &["daemon", "--host", "gamma"],
        &["enqueue", "p"],
        &["runs"],
        &["status"],
        &["check"],
    ] {
        let out = f.cmd(args);
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        let err = out.stderr.trim();
        assert!(
            err.contains("fleet.db")
                && err.contains("version 999")
                && err.contains("upgrade fleet"),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    let db = f.db();
    let version: i64 = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 999, "the newer database was migrated over");
    let runs: i64 = db
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 1, "a run was written to the newer database");

    // The daemon refused never ran: its host name is not the one this state directory last
    // ran as.
    db.execute_batch(&format!("PRAGMA user_version = {known}"))
        .unwrap();
    let out = f.cmd(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_ne!(status["host"], "gamma", "{status}");
}

/// A schema version fleet never writes (another program reset or mangled it) is refused in one
/// line, not by a migration failing with its SQL.
#[test]
fn a_schema_version_fleet_never_writes_is_refused_in_one_line() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    f.cmd_ok(&["enqueue", "p"]);
    for version in [0, -1] {
        f.db()
            .execute_batch(&format!("PRAGMA user_version = {version}"))
            .unwrap();
        let out = f.cmd(&["runs"]);
        assert_eq!(out.code(), Some(2), "{version}: {out:?}");
        let err = out.stderr.trim();
        assert_eq!(err.lines().count(), 1, "{version}: {err}");
        assert!(
            err.contains("fleet.db") && err.contains(&format!("is {version}")),
            "{version}: {err}"
        );
    }
}
