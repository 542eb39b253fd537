//! Two hosts (daemons with host names a and b, their own state directories) on one database:
//! they never fence each other and both run work; a run ended on one host has its log read from
//! the other; a host SIGSTOPped with a run in flight is forgotten by the operator, its run is
//! retried on the other host, and once resumed it kills its stale command, writes nothing over
//! the run taken from it, and rejoins under a new epoch.

use std::path::Path;

use super::{database_url, gated_on_hosts_a_and_b, pg_fleet};
use crate::common::*;

/// A fleet on `url` named `host`, whose projects are `projects` (TOML text).
fn host(url: &str, name: &str, projects: &str) -> Fleet {
    let body = format!("host = \"{name}\"\n{projects}");
    pg_fleet(url, move |_| body)
}

/// The `fleet hosts --json` entry of `name`, as `f` reads it.
fn host_entry(f: &Fleet, name: &str) -> serde_json::Value {
    let out = f.cmd_ok(&["hosts", "--json"]);
    let list: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    list.into_iter()
        .find(|h| h["name"] == name)
        .unwrap_or_else(|| panic!("no host {name} in {out}"))
}

#[test]
fn two_hosts_share_the_work_and_read_each_others_logs() {
    let Some(url) = database_url() else { return };
    let shared = tempfile::tempdir().unwrap();
    let go = shared.path().join("go");
    let projects = gated_on_hosts_a_and_b(&go, "echo hello from $FLEET_RUN_ID; ");
    let a = host(&url, "a", &projects);
    let b = host(&url, "b", &projects);
    let mut da = a.start_daemon();
    let mut db = b.start_daemon();
    let ids: Vec<i64> = (0..4).map(|i| a.enqueue(&format!("p{i}"))).collect();
    // Each host may run one at a time: two running at once are one on each, and neither
    // fenced the other.
    a.wait_until(DEADLINE, "a run on each host", || {
        let running: Vec<String> = ids
            .iter()
            .map(|id| a.run(*id))
            .filter(|r| r["status"] == "running")
            .map(|r| r["host"].as_str().unwrap_or("").to_string())
            .collect();
        running.len() == 2 && running.contains(&"a".into()) && running.contains(&"b".into())
    });
    std::fs::write(&go, "").unwrap();
    let mut ran_on = std::collections::BTreeMap::new();
    for id in &ids {
        let r = a.wait_terminal(*id);
        assert_eq!(status_of(&r), "succeeded", "{r}");
        ran_on.insert(*id, r["host"].as_str().unwrap().to_string());
    }
    da.assert_alive();
    db.assert_alive();
    let (ha, hb) = (host_entry(&a, "a"), host_entry(&a, "b"));
    assert_eq!(
        (ha["state"].as_str(), hb["state"].as_str()),
        (Some("alive"), Some("alive"))
    );
    assert_ne!(ha["epoch"], hb["epoch"]);
    // The log of a run b ran, read on a (whose state directory never saw it): from the tail b
    // keeps in the database just after it records the run's end, not with it.
    let (on_b, _) = ran_on.iter().find(|(_, h)| *h == "b").unwrap();
    let mut log = String::new();
    a.wait_until(
        DEADLINE,
        &format!("run {on_b}'s log to be read on a"),
        || {
            let out = a.cmd(&["logs", &on_b.to_string()]);
            let read = out.code() == Some(0);
            log = out.stdout;
            read
        },
    );
    assert!(log.contains(&format!("hello from {on_b}")), "{log}");
    // Fleet-wide from either host: events and seats of both, run folders of its own.
    assert_check_ok(&a);
    assert_check_ok(&b);
}

#[test]
fn a_forgotten_host_stops_its_stale_command_and_rejoins() {
    let Some(url) = database_url() else { return };
    let shared = tempfile::tempdir().unwrap();
    let pids = shared.path().join("pids");
    let go = shared.path().join("go");
    // No backoff: the retry would wait the default 10 s otherwise, for nothing this test looks
    // at (b, stopped, cannot take it meanwhile).
    let projects = format!(
        "[projects.long]\nretries = 1\nretry_backoff = \"0s\"\ncommand = {}\n",
        sh(&format!(
            "echo $$ >> {pids}; while [ ! -e {go} ]; do sleep 0.05; done",
            pids = shell_quote(&pids),
            go = shell_quote(&go)
        ))
    );
    let a = host(&url, "a", &projects);
    let b = host(&url, "b", &projects);
    let mut db = b.start_daemon();
    let id = b.enqueue("long");
    b.wait_status(id, "running");
    let first = first_pid(&pids);
    let mut da = a.start_daemon();
    db.signal(Signal::STOP);
    // Alive a moment ago: refused without --force.
    let refused = a.cmd(&["hosts", "forget", "b"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    a.wait_until(DEADLINE, "b to fall silent", || {
        host_entry(&a, "b")["state"] == "silent"
    });
    let said = a.cmd_ok(&["hosts", "forget", "b"]);
    assert!(said.contains(&format!("runs lost: {id}")), "{said}");
    assert_eq!(status_of(&a.run(id)), "lost");
    // The retry runs on a while b's stale command still runs (b is stopped).
    let retry = a.wait_run(id + 1, "the retry to run on a", |r| {
        r["status"] == "running" && r["host"] == "a"
    });
    assert_eq!(retry["retry_of"], id);
    db.signal(Signal::CONT);
    a.wait_until(DEADLINE, "b to stop its stale command", || {
        process_gone(first)
    });
    a.wait_until(DEADLINE, "b to rejoin", || {
        host_entry(&a, "b")["state"] == "alive"
    });
    db.assert_alive();
    assert!(
        db.stderr().contains("taken from it"),
        "b does not say why it stopped the command:\n{}",
        db.stderr()
    );
    // `fleet check` on b while the retry runs on a: a's run folders are not b's to check.
    b.wait_until(DEADLINE, "fleet check on b to pass", || {
        b.cmd(&["check"]).status.success()
    });
    std::fs::write(&go, "").unwrap();
    let r = a.wait_terminal(id + 1);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    // Nothing b wrote changed the run taken from it.
    assert_eq!(status_of(&a.run(id)), "lost");
    da.assert_alive();
    assert_check_ok(&a);
}

/// The pid the first attempt wrote.
fn first_pid(pids: &Path) -> i32 {
    let mut found = None;
    wait_for(
        DEADLINE,
        std::time::Duration::from_millis(20),
        "the command's pid",
        || {
            found = std::fs::read_to_string(pids)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()));
            found.is_some()
        },
        String::new,
    );
    found.unwrap()
}

/// One config for the fleet: the first host publishes its file; a second host started with a
/// different file applies the published one and says its file differs; an edit on the first
/// host, reloaded, is published as the next version and applied by the second.
#[test]
fn the_published_config_is_the_one_in_force_on_every_host() {
    let Some(url) = database_url() else { return };
    let projects =
        |cap: u32| format!("max_concurrency = {cap}\n[projects.p]\ncommand = [\"true\"]\n");
    let a = host(&url, "a", &projects(3));
    let b = host(&url, "b", &projects(7));
    let _da = a.start_daemon();
    a.wait_until(DEADLINE, "a to publish its config", || {
        host_entry(&a, "a")["config_version"] == 1
    });
    let _db = b.start_daemon();
    b.wait_until(
        DEADLINE,
        "b to apply version 1 and say its file differs",
        || {
            let h = host_entry(&b, "b");
            h["config_version"] == 1 && h["config_differs"] == true
        },
    );
    let status = b.status();
    assert_eq!(status["published_config_version"], 1, "{status}");
    assert_eq!(status["local_config_differs"], true, "{status}");
    // b's caps are the published ones, not its file's.
    b.wait_until(DEADLINE, "b to show the published global cap", || {
        b.status()["global"]["max_concurrency"] == 3
    });
    // An edit on a, reloaded: the next version, applied by b.
    let body = std::fs::read_to_string(a.path().join("fleet.toml")).unwrap();
    a.replace_config(&body.replace("max_concurrency = 3", "max_concurrency = 2"));
    a.cmd_ok(&["reload"]);
    b.wait_until(DEADLINE, "b to apply version 2", || {
        host_entry(&b, "b")["config_version"] == 2
    });
    b.wait_until(DEADLINE, "b to show the new global cap", || {
        b.status()["global"]["max_concurrency"] == 2
    });
    // Runs still start on b under the published config (its claims carry version 2).
    let id = b.enqueue("p");
    assert_eq!(status_of(&b.wait_terminal(id)), "succeeded");
}
