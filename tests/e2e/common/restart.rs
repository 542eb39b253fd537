//! Helpers of the restart tests, which the PostgreSQL tests share: gated commands and their
//! record files, EVAL barriers (also for the tests of `pause` and `max_parallel`), epochs, and
//! the processes a crash leaves. They only observe and wait; the scenarios are the tests'.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use serde_json::Value;

use crate::common::*;

/// The lines of a file (none if it does not exist).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect()
}

/// A command that appends `start $FLEET_RUN_ID` to `start`, waits for `go` to exist, appends
/// `end <ns-time>` to `end`, and exits `code`.
pub fn gated_command(start: &Path, go: &Path, end: &Path, code: i32) -> String {
    sh(&format!(
        "echo start $FLEET_RUN_ID >> {start}; \
         while [ ! -e {go} ]; do sleep 0.05; done; \
         echo end $(date +%s%N) >> {end}; \
         exit {code}",
        start = shell_quote(start),
        go = shell_quote(go),
        end = shell_quote(end),
    ))
}

/// A command that appends `start $FLEET_RUN_ID <ns-time>` to `rec` and exits 0.
pub fn quick_command(rec: &Path) -> String {
    sh(&format!(
        "echo start $FLEET_RUN_ID $(date +%s%N) >> {}",
        shell_quote(rec)
    ))
}

/// The nanosecond timestamp in the last field of a line.
pub fn stamp(line: &str) -> u128 {
    line.split_whitespace()
        .last()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no timestamp in {line:?}"))
}

/// Proof that the running daemon completed at least `n` EVALs after this call began, without
/// starting any run: the daemon's loop does `reload (if asked) → EVAL` in one iteration, and every
/// reload rewrites the daemon row's `updated_at`. So once the effect of reload k+1 is seen, the
/// EVAL that followed reload k has finished. `fleet reload` asks for a reload through the control
/// socket.
pub fn eval_barrier(f: &Fleet, n: usize) {
    for i in 0..=n {
        let before = daemon_updated_at(f);
        // Retried: right after a restart the control socket may not be bound yet.
        f.wait_until(DEADLINE, "`fleet reload` to reach the daemon", || {
            f.cmd(&["reload"]).code() == Some(0)
        });
        f.wait_until(DEADLINE, &format!("reload {i} of the EVAL barrier"), || {
            daemon_updated_at(f) != before
        });
    }
}

/// Waits for the daemon to abort at an injected failpoint; panics if run `id` gets past `starting`
/// instead (the failpoint did not fire: a `fleet` binary built without `--all-features`).
pub fn wait_daemon_abort(f: &Fleet, d: &mut Daemon<'_>, id: i64, what: &str) {
    let mut st = None;
    let mut run = Value::Null;
    f.wait_until(DEADLINE, what, || {
        st = d.try_exit();
        if st.is_some() {
            return true;
        }
        run = f.run(id);
        !matches!(status_of(&run), "queued" | "starting")
    });
    match st {
        Some(st) if st.signal() == Some(libc::SIGABRT) => {}
        _ => panic!(
            "the daemon should have aborted at the failpoint ({what}) but {}; run {id}: {run}. \
             Is {} built with the `failpoints` feature (cargo test --all-features)? Another build \
             without it in the same target folder replaces the binary.\n{}",
            match st {
                Some(st) => format!("it ended with {st}"),
                None => "it runs on".to_string(),
            },
            fleet_bin().display(),
            d.stderr()
        ),
    }
}

/// Live processes of this test other than `except` (a daemon), fork servers (each lives as
/// long as its daemon) and the test itself: shims and commands.
pub fn others(f: &Fleet, except: &[i32]) -> Vec<i32> {
    let me = std::process::id() as i32;
    marked_pids(&f.marker)
        .into_iter()
        .filter(|p| *p != me && !except.contains(p) && !is_fork_server(*p))
        .collect()
}

/// Waits until `fleet status --json` shows daemon `pid` with an epoch above `after`, and returns
/// that epoch. (`fleet status` names the lock holder as soon as it holds the state directory, but
/// the epoch only once it has taken over the database.)
pub fn wait_epoch(f: &Fleet, pid: i32, after: i64) -> i64 {
    let mut epoch = 0;
    f.wait_until(
        DEADLINE,
        &format!("daemon {pid} to take an epoch above {after}"),
        || {
            let s = f.status();
            epoch = s["daemon"]["epoch"].as_i64().unwrap_or(0);
            s["daemon"]["pid"].as_i64() == Some(pid as i64) && epoch > after
        },
    );
    epoch
}

/// The daemon's epoch and pid from `fleet status --json`, as they are now.
pub fn daemon_epoch_pid(f: &Fleet) -> (i64, i64) {
    let s = f.status();
    (
        s["daemon"]["epoch"]
            .as_i64()
            .unwrap_or_else(|| panic!("no epoch: {s}")),
        s["daemon"]["pid"]
            .as_i64()
            .unwrap_or_else(|| panic!("no pid: {s}")),
    )
}

/// Asserts `id` stays in status `queued` while the daemon completes a few EVALs.
pub fn assert_stays_queued(f: &Fleet, id: i64, why: &str) {
    eval_barrier(f, 3);
    let r = f.run(id);
    assert_eq!(status_of(&r), "queued", "{why}: {r}\n{}", f.diagnostics());
}

/// `fleet check --json`'s report.
pub fn check_report(f: &Fleet) -> Value {
    serde_json::from_str(&f.cmd(&["check", "--json"]).stdout).unwrap()
}

/// The kinds of the violations in a `fleet check --json` report, in its order.
pub fn violation_kinds(report: &Value) -> Vec<&str> {
    report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["kind"].as_str().unwrap())
        .collect()
}

/// A connection of another program to the install's database.
pub fn outside_writer(f: &Fleet) -> rusqlite::Connection {
    let db = rusqlite::Connection::open(f.state_dir().join("fleet.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(30)).unwrap();
    db
}

/// An install with a global cap of 1: `held` (a gated command recording its starts) and
/// `other` (a quick one).
pub fn held_and_other() -> Fleet {
    Fleet::with(|dir| {
        format!(
            "max_concurrency = 1\ntick = \"200ms\"\n\
             [projects.held]\ncommand = {}\n\
             [projects.other]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                0
            ),
            quick_command(&dir.join("other.start")),
        )
    })
}
