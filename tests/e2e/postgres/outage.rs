//! The database going away under a running daemon: a PostgreSQL restart in the middle of a
//! drain costs time, not correctness; while it is stopped, the runs in flight finish, nothing
//! is claimed, and their exits are recorded with their real statuses once it is back; the
//! outage is logged once and its end once, whatever the number of tries.
//!
//! Each test has a cluster of its own (`pgtest::OwnCluster`), so stopping it disturbs no other
//! test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use super::{assert_no_sqlite, pg_fleet, url_of};
use crate::common::restart::*;
use crate::common::*;

/// The daemon logs its outage retries at debug: a test can see that it tried many times while
/// logging one warning.
const OUTAGE_DEBUG: (&str, &str) = ("RUST_LOG", "info,supervisor::daemon::outage=debug");

/// The line the daemon logs when it finds the database gone, and when it is back.
const DOWN_LINE: &str = "the database cannot be reached: claiming nothing";
const BACK_LINE: &str = "the database is reachable again";

/// A cluster of the test's own, and a fleet on a new database there whose fleet.toml goes on
/// with `body(folder)`; `None` after pgtest's loud skip line.
fn own_fleet(body: impl FnOnce(&Path) -> String) -> Option<(pgtest::OwnCluster, Fleet)> {
    let pg = pgtest::OwnCluster::start()?;
    let url = url_of(&pg.database());
    let f = pg_fleet(&url, body);
    Some((pg, f))
}

/// What the daemon logged from `from` (a length of its log, taken just before the test stopped
/// the server) on: the outage the test caused. An earlier outage of the daemon's own (a
/// connection that outlasted the pool's wait on a loaded machine) is logged the same way and
/// is not this one; it is shown, never counted.
fn log_since(path: &Path, from: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let before = String::from_utf8_lossy(&text[..from.min(text.len())]);
    for line in before
        .lines()
        .filter(|l| l.contains(DOWN_LINE) || l.contains(BACK_LINE))
    {
        eprintln!("before the server was stopped: {line}");
    }
    String::from_utf8_lossy(&text[from.min(text.len())..]).into_owned()
}

/// The length of the log at `path` now.
fn log_len(path: &Path) -> usize {
    std::fs::metadata(path).map_or(0, |m| m.len() as usize)
}

/// The lines of the daemon's log that contain `what`.
fn count(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

#[test]
fn a_database_restart_mid_drain_costs_time_not_correctness() {
    const RUNS: usize = 40;
    const CAP: usize = 4;
    let Some((mut pg, f)) = own_fleet(|dir| {
        // Distinct exit codes: 0, 1 or 2 by run id, after the recorder's end line.
        let cmd = sh(&format!(
            "{}; exit $((FLEET_RUN_ID % 3))",
            recorder_script(&dir.join("records"), "0.2")
        ));
        let mut t = format!("max_concurrency = {CAP}\n");
        // One active run per project: more projects than the cap, so the cap binds.
        for i in 0..8 {
            t += &format!("[projects.p{i}]\ncommand = {cmd}\n");
        }
        t
    }) else {
        return;
    };
    let ids: Vec<i64> = (0..RUNS)
        .map(|i| f.enqueue(&format!("p{}", i % 8)))
        .collect();
    let mut d = f.start_daemon_env(&[OUTAGE_DEBUG]);
    // Twice: after a quarter of the runs and after half of them.
    for part in [4, 2] {
        f.wait_until(DEADLINE, "a part of the runs to end", || {
            f.runs().iter().filter(|r| is_terminal(r)).count() >= RUNS / part
        });
        pg.restart_immediate();
    }
    let path = d.stderr_path().to_path_buf();
    f.wait_until(Duration::from_secs(180), "all runs to end", || {
        let runs = f.runs();
        runs.len() == RUNS && runs.iter().all(is_terminal)
    });
    d.assert_alive();
    // Whether an operation was in flight when the server went (the restart is quick: a pooled
    // connection that died is replaced at check-out, without an outage).
    let log = std::fs::read_to_string(&path).unwrap_or_default();
    eprintln!(
        "outage lines: {}, recovery lines: {}",
        count(&log, DOWN_LINE),
        count(&log, BACK_LINE)
    );
    for r in f.runs() {
        let id = r["id"].as_i64().unwrap();
        let code = id % 3;
        let want = if code == 0 { "succeeded" } else { "failed" };
        assert_eq!(status_of(&r), want, "{r}\n{}", f.diagnostics());
        assert_eq!(r["exit_code"], code, "the command's real exit code: {r}");
        assert_eq!(r["attempt"], 1, "started once, never retried: {r}");
    }
    let records = read_records(&f.file("records"));
    let mut starts: BTreeMap<i64, usize> = BTreeMap::new();
    for r in records.iter().filter(|r| r.start) {
        *starts.entry(r.run_id).or_default() += 1;
    }
    assert!(
        starts.values().all(|&n| n == 1),
        "a run started twice: {starts:?}"
    );
    assert_eq!(records.len(), 2 * RUNS, "one start and one end per run");
    let recorded: BTreeSet<i64> = starts.keys().copied().collect();
    assert_eq!(recorded, ids.iter().copied().collect::<BTreeSet<_>>());
    let overlap = max_overlap(&records);
    if let Err(e) = overlap.check(CAP, &[]) {
        panic!("{e}");
    }
    assert_check_ok(&f);
    assert_no_sqlite(&f);
}

#[test]
fn a_stopped_database_lets_runs_finish_claims_nothing_and_records_their_exits_once_back() {
    let Some((mut pg, f)) = own_fleet(|dir| {
        let gated = |name: &str, code: i32| {
            gated_command(
                &dir.join(format!("{name}.start")),
                &dir.join("GO"),
                &dir.join(format!("{name}.end")),
                code,
            )
        };
        format!(
            "max_concurrency = 2\n\
             [projects.three]\ncommand = {}\n\
             [projects.zero]\ncommand = {}\n\
             [projects.later]\ncommand = {}\n",
            gated("three", 3),
            gated("zero", 0),
            quick_command(&dir.join("later.start")),
        )
    }) else {
        return;
    };
    let three = f.enqueue("three");
    let zero = f.enqueue("zero");
    let mut d = f.start_daemon_env(&[OUTAGE_DEBUG]);
    for id in [three, zero] {
        f.wait_run(id, "running with a pid", |r| {
            r["status"] == "running" && r["pid"].is_i64()
        });
    }
    // Queued behind the cap: the two slots free up while the database is down.
    let later: Vec<i64> = (0..3).map(|_| f.enqueue("later")).collect();

    let path = d.stderr_path().to_path_buf();
    let from = log_len(&path);
    pg.stop_immediate();
    // The runs in flight go on and end, longer after the database went than a run lasts.
    std::fs::write(f.file("GO"), "").unwrap();
    let log = || log_since(&path, from);
    f.wait_until(
        DEADLINE,
        "both runs to end and the outage to be noticed",
        || {
            lines(&f.file("three.end")).len() == 1
                && lines(&f.file("zero.end")).len() == 1
                && count(&log(), DOWN_LINE) == 1
        },
    );
    // The daemon keeps trying (its pause grows from 1 s), and keeps claiming nothing: a few
    // tries after the exits, still no run of `later` has started.
    let tries_at_exit = count(&log(), "still cannot be reached");
    f.wait_until(DEADLINE, "two more tries after the runs ended", || {
        count(&log(), "still cannot be reached") >= tries_at_exit + 2
    });
    d.assert_alive();
    assert!(
        lines(&f.file("later.start")).is_empty(),
        "a run was claimed while the database was down\n{}",
        log()
    );
    // `fleet status` says so, and fails.
    let out = f.cmd(&["status"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("database"), "{out:?}");
    let back_at = Instant::now();
    pg.start_again();
    let r = f.wait_terminal(three);
    assert_eq!(status_of(&r), "failed", "{r}");
    assert_eq!(r["exit_code"], 3, "the real exit code: {r}");
    let r = f.wait_terminal(zero);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(r["exit_code"], 0, "{r}");
    for id in &later {
        let r = f.wait_terminal(*id);
        assert_eq!(status_of(&r), "succeeded", "{r}");
    }
    for id in [three, zero] {
        assert_eq!(f.run(id)["attempt"], 1, "never retried");
    }
    assert_eq!(lines(&f.file("later.start")).len(), later.len());
    // The recovery line counts the ends that waited, before writing them.
    let text = log();
    let back = text.lines().find(|l| l.contains(BACK_LINE)).unwrap_or("");
    assert!(
        back.contains("unwritten=") && !back.contains("unwritten=0"),
        "{back:?}\n{text}"
    );
    d.assert_alive();
    eprintln!(
        "drained {:?} after the database came back",
        back_at.elapsed()
    );
    assert_check_ok(&f);
    assert_no_sqlite(&f);
}

#[test]
fn an_outage_is_logged_once_when_it_starts_and_once_when_it_ends() {
    let Some((mut pg, f)) = own_fleet(|dir| {
        format!(
            "[projects.q]\ncommand = {}\n",
            quick_command(&dir.join("q.start"))
        )
    }) else {
        return;
    };
    let first = f.enqueue("q");
    let mut d = f.start_daemon_env(&[OUTAGE_DEBUG]);
    f.wait_status(first, "succeeded");
    let path = d.stderr_path().to_path_buf();
    let from = log_len(&path);
    pg.stop_immediate();
    let log = || log_since(&path, from);
    // Several tries (each logged at debug only), then the database comes back.
    f.wait_until(DEADLINE, "two more tries during the outage", || {
        count(&log(), "still cannot be reached") >= 2
    });
    pg.start_again();
    f.wait_until(DEADLINE, "the recovery line", || {
        count(&log(), BACK_LINE) >= 1
    });
    // A run enqueued now runs: the daemon is working again.
    let second = f.enqueue("q");
    f.wait_status(second, "succeeded");
    d.assert_alive();
    let text = log();
    assert_eq!(count(&text, DOWN_LINE), 1, "one outage line:\n{text}");
    assert_eq!(count(&text, BACK_LINE), 1, "one recovery line:\n{text}");
    // Nothing else at warning or above per try (the pool, the change probe, the epoch check).
    let noisy = text
        .lines()
        .filter(|l| (l.contains("WARN") || l.contains("ERROR")) && !l.contains(DOWN_LINE))
        .count();
    assert_eq!(noisy, 0, "other warnings during the outage:\n{text}");
}

/// A server that is there but answers nothing (its processes stopped, as on a frozen machine):
/// `fleet status` fails with a one-line error instead of hanging. (Whether the daemon notices
/// such a server is not tested here: see the operations guide's outage section.)
#[test]
fn a_frozen_server_fails_a_command_instead_of_hanging_it() {
    let Some((pg, f)) = own_fleet(|dir| {
        format!(
            "[projects.q]\ncommand = {}\n",
            quick_command(&dir.join("q.start"))
        )
    }) else {
        return;
    };
    f.enqueue("q");
    pg.signal_all(libc::SIGSTOP);
    // Generous: the bound is the open timeout (30 s); without one it never returns.
    let out = run_with_deadline(
        {
            let mut c = f.command();
            c.arg("status");
            c
        },
        Duration::from_secs(120),
    );
    pg.signal_all(libc::SIGCONT);
    assert_ne!(out.code(), Some(0), "{}", out.stdout);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("did not answer"), "{}", out.stderr);
}
