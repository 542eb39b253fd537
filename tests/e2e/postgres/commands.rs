//! The commands against PostgreSQL: two state directories on one database see the same queue
//! and history, `runs --json`, `status`, `wait`, `logs` and `check` work, and a bad or
//! unreachable database is reported without its password.

use std::time::Duration;

use super::{assert_no_sqlite, database_url, pg_fleet};
use crate::common::*;

#[test]
fn commands_read_and_write_the_postgres_database() {
    let Some(url) = database_url() else { return };
    let body =
        |_: &std::path::Path| "[projects.hello]\ncommand = [\"echo\", \"hi there\"]\n".into();
    let f = pg_fleet(&url, body);
    // Another state directory on the same database: what it sees can only come from PostgreSQL.
    let other = pg_fleet(&url, body);

    let a = f.enqueue("hello");
    let b = other.enqueue("hello");
    let ids: Vec<i64> = f.runs().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.contains(&a) && ids.contains(&b), "{ids:?}");
    let queued = f.runs_with(&["--status", "queued"]);
    assert_eq!(queued.len(), 2, "{queued:?}");
    // A pause written from one directory holds the project for the other's view too, and a
    // queued run cancelled from one is cancelled for both.
    f.cmd_ok(&["pause", "hello", "--project"]);
    let projects: serde_json::Value =
        serde_json::from_str(&other.cmd_ok(&["projects", "--json"])).unwrap();
    assert_eq!(projects[0]["paused"], true, "{projects}");
    f.cmd_ok(&["resume", "hello", "--project"]);
    let c = other.enqueue("hello");
    f.cmd_ok(&["cancel", &c.to_string()]);
    assert_eq!(status_of(&other.run(c)), "cancelled");

    let mut d = f.start_daemon();
    for id in [a, b] {
        let r = f.wait_terminal(id);
        assert_eq!(status_of(&r), "succeeded", "{r}");
    }
    // The run folders are local: the daemon's state directory has the logs.
    assert!(f.logs(a).contains("hi there"));
    f.cmd_ok(&["wait", &a.to_string()]);
    let s = f.status();
    assert_eq!(s["daemon"]["running"], true, "{s}");
    assert_eq!(s["daemon"]["pid"].as_i64(), Some(d.pid() as i64), "{s}");
    let human = f.cmd_ok(&["status"]);
    assert!(human.contains("hello") || !human.is_empty(), "{human}");
    f.cmd_ok(&["projects"]);
    // Retention reads and forgets through the same store (nothing to let go here).
    let pruned = f.cmd_ok(&["prune", "--dry-run"]);
    assert!(pruned.contains("would prune 0 runs"), "{pruned}");
    assert_check_ok(&f);
    // The other directory reads the same history.
    assert_eq!(status_of(&other.run(b)), "succeeded");
    assert_no_sqlite(&f);
    assert_no_sqlite(&other);

    // A clean stop closes its connections without a panic (the driver's client must not be
    // closed on the async runtime's threads).
    d.signal(Signal::TERM);
    f.wait_until(DEADLINE, "the daemon to stop on SIGTERM", || {
        d.try_exit().is_some()
    });
    let st = d.try_exit().unwrap();
    assert_eq!(st.code(), Some(0), "{st}\n{}", d.stderr());
}

#[test]
fn a_bad_database_url_is_refused_at_load_without_its_password() {
    let f = Fleet::new(
        "max_concurrency = 2\n\
         database = \"postgresql://fleet:hunter2@db.example:notaport/jobs\"\n\
         [projects.p]\ncommand = [\"true\"]\n",
    );
    let out = f.cmd(&["validate"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains("fleet.toml"), "{text}");
    assert!(text.contains("database"), "{text}");
    assert!(text.contains(":2"), "names line 2: {text}");
    assert!(!text.contains("hunter2"), "the password leaked: {text}");
    let out = f.cmd(&["runs"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(!out.stderr.contains("hunter2"), "{out:?}");
}

#[test]
fn an_unreachable_database_is_waited_for_at_daemon_start() {
    // No server listens in this folder: the connection fails at once, every time.
    let nowhere = tempfile::tempdir().unwrap();
    let url = format!(
        "postgresql://fleet:hunter2@/jobs?host={}&port=5432",
        nowhere.path().display()
    );
    let f = pg_fleet(&url, |_| "[projects.p]\ncommand = [\"true\"]\n".into());
    let mut d = f.spawn_daemon(&[]);
    f.wait_until(
        Duration::from_secs(30),
        "two failed tries in the log",
        || d.stderr().matches("cannot be reached").count() >= 2,
    );
    d.assert_alive();
    assert!(!d.stderr().contains("hunter2"), "{}", d.stderr());
    // A command cannot reach it either: the action failed (1), the input was fine.
    let out = f.cmd(&["enqueue", "p"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("jobs"), "names the database: {out:?}");
    assert!(!out.stderr.contains("hunter2"), "{out:?}");
    // A stop while it waits is a clean one, without waiting for the database.
    d.signal(Signal::TERM);
    f.wait_until(DEADLINE, "the daemon to stop", || d.try_exit().is_some());
    assert_eq!(d.exited().unwrap().code(), Some(0), "{}", d.stderr());
    assert!(
        d.stderr()
            .contains("stopping before the database could be reached"),
        "{}",
        d.stderr()
    );
    assert_no_sqlite(&f);
}
