//! End-to-end tests of the restart contract and the brief's three failures: a daemon killed with
//! SIGKILL comes back and adopts what is still running (with and without namespaces), finalizes
//! what ended while it was down, survives an external writer holding the database's write lock,
//! refuses to share its state directory, and never starts a run twice across crashes injected
//! with failpoints (the late-shim tombstone trap, a crash right after the claim).
//!
//! Every test drives the real `fleet` binary (see tests/common/mod.rs); run them with
//! `cargo test --all-features --test restart` so the binary has its failpoints compiled in.

mod common;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Helpers (local to this file).

fn status_of(r: &Value) -> &str {
    r["status"].as_str().unwrap_or("?")
}

/// A path as a single-quoted shell word (the temporary folders hold no quotes).
fn q(p: &Path) -> String {
    let s = p.display().to_string();
    assert!(!s.contains('\''), "path must not contain a quote: {s}");
    format!("'{s}'")
}

/// The lines of a file (none if it does not exist).
fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect()
}

/// A command that appends `start $FLEET_RUN_ID` to `start`, waits for `go` to exist, appends
/// `end <ns-time>` to `end`, and exits `code`.
fn gated_command(start: &Path, go: &Path, end: &Path, code: i32) -> String {
    sh(&format!(
        "echo start $FLEET_RUN_ID >> {start}; \
         while [ ! -e {go} ]; do sleep 0.05; done; \
         echo end $(date +%s%N) >> {end}; \
         exit {code}",
        start = q(start),
        go = q(go),
        end = q(end),
    ))
}

/// A command that appends `start $FLEET_RUN_ID <ns-time>` to `rec` and exits 0.
fn quick_command(rec: &Path) -> String {
    sh(&format!(
        "echo start $FLEET_RUN_ID $(date +%s%N) >> {}",
        q(rec)
    ))
}

/// The nanosecond timestamp in the last field of a line.
fn stamp(line: &str) -> u128 {
    line.split_whitespace()
        .last()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no timestamp in {line:?}"))
}

/// `fleet check` exits 0 (printing what it found otherwise).
fn assert_check_ok(f: &Fleet) {
    let out = f.cmd(&["check", "--json"]);
    assert_eq!(
        out.code(),
        Some(0),
        "fleet check found violations:\nstdout: {}\nstderr: {}\n{}",
        out.stdout,
        out.stderr,
        f.diagnostics()
    );
}

/// The run folder of run `id`.
fn run_dir(f: &Fleet, id: i64) -> PathBuf {
    f.state_dir().join("runs").join(id.to_string())
}

/// A read-only connection to the fleet database.
fn db_read(f: &Fleet) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(
        f.state_dir().join("fleet.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open fleet.db read-only")
}

/// The daemon row's `updated_at` (written by the takeover and by every reload).
fn daemon_updated_at(f: &Fleet) -> i64 {
    db_read(f)
        .query_row("SELECT updated_at FROM daemon WHERE id = 1", [], |r| {
            r.get(0)
        })
        .expect("read the daemon row")
}

/// Proof that the running daemon completed at least `n` EVALs after this call began, without
/// starting any run: the daemon's loop does `reload (if asked) → EVAL` in one iteration, and every
/// reload rewrites the daemon row's `updated_at`. So once the effect of reload k+1 is seen, the
/// EVAL that followed reload k has finished. `fleet reload` asks for a reload through the control
/// socket.
fn eval_barrier(f: &Fleet, n: usize) {
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
fn wait_daemon_abort(f: &Fleet, d: &mut Daemon<'_>, id: i64, what: &str) {
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
fn others(f: &Fleet, except: &[i32]) -> Vec<i32> {
    let me = std::process::id() as i32;
    marked_pids(&f.marker)
        .into_iter()
        .filter(|p| *p != me && !except.contains(p) && !is_fork_server(*p))
        .collect()
}

/// Waits until `fleet status --json` shows daemon `pid` with an epoch above `after`, and returns
/// that epoch. (`fleet status` names the lock holder as soon as it holds the state directory, but
/// the epoch only once it has taken over the database.)
fn wait_epoch(f: &Fleet, pid: i32, after: i64) -> i64 {
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
fn daemon_epoch_pid(f: &Fleet) -> (i64, i64) {
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
fn assert_stays_queued(f: &Fleet, id: i64, why: &str) {
    eval_barrier(f, 3);
    let r = f.run(id);
    assert_eq!(status_of(&r), "queued", "{why}: {r}\n{}", f.diagnostics());
}

// ---------------------------------------------------------------------------------------------
// 1 and 2. The brief's failure 1: double spawn after restart.

#[test]
fn failure1_zero_namespaces_sigkill_restart_adopts_run() {
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 1\n\
             [projects.held]\ncommand = {}\n\
             [projects.other]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                3
            ),
            quick_command(&dir.join("other.start")),
        )
    });
    let start_file = f.file("held.start");

    let mut d1 = f.start_daemon();
    let epoch1 = wait_epoch(&f, d1.pid(), 0);
    let held = f.enqueue("held");
    let before = f.wait_run(held, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    f.wait_until(DEADLINE, "the start line of the held run", || {
        !lines(&start_file).is_empty()
    });
    d1.kill();

    let d2 = f.start_daemon();
    let epoch2 = wait_epoch(&f, d2.pid(), epoch1);
    eprintln!("epochs {epoch1} then {epoch2}");

    // A run of another project, queued while the adopted run holds the only slot of the global
    // cap: the fallback packer must count the adopted run and leave it queued.
    let other = f.enqueue("other");
    assert_stays_queued(&f, other, "global cap 1 is taken by the adopted run");

    let r = f.run(held);
    assert_eq!(
        status_of(&r),
        "running",
        "the adopted run is still running: {r}"
    );
    assert_eq!(
        r["pid"], before["pid"],
        "same command process (adopted): {r}"
    );
    assert_eq!(r["attempt"], 1, "{r}");
    assert_eq!(
        lines(&start_file),
        [format!("start {held}")],
        "started again after restart"
    );
    assert!(
        !f.file("other.start").exists(),
        "other ran while the cap was taken"
    );
    let s = f.status();
    assert_eq!(s["global"]["active"], 1, "{s}");

    // Let the adopted run end: its real exit code, recorded by its shim.
    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "failed", "{r}");
    assert_eq!(r["exit_code"], 3, "the real exit code: {r}");
    assert_eq!(r["attempt"], 1, "{r}");

    // The slot is free: the queued run starts now, and only after the adopted one ended.
    let r = f.wait_terminal(other);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    let held_end = lines(&f.file("held.end"));
    let other_start = lines(&f.file("other.start"));
    assert_eq!(held_end.len(), 1, "{held_end:?}");
    assert_eq!(other_start.len(), 1, "{other_start:?}");
    assert!(
        stamp(&other_start[0]) >= stamp(&held_end[0]),
        "other started before the adopted run ended: {other_start:?} {held_end:?}"
    );
    assert_eq!(lines(&start_file), [format!("start {held}")]);
    assert_eq!(f.runs().len(), 2, "no retry or extra run: {:#?}", f.runs());
    assert_check_ok(&f);
}

#[test]
fn failure1_with_namespaces_sigkill_restart_adopts_run() {
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 4\n\
             [namespaces.ops]\nmax_concurrency = 1\n\
             [projects.held]\nnamespace = \"ops\"\ncommand = {}\n\
             [projects.sibling]\nnamespace = \"ops\"\ncommand = {}\n\
             [projects.free]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                3
            ),
            quick_command(&dir.join("sibling.start")),
            quick_command(&dir.join("free.start")),
        )
    });
    let start_file = f.file("held.start");

    let mut d1 = f.start_daemon();
    let epoch1 = wait_epoch(&f, d1.pid(), 0);
    let held = f.enqueue("held");
    let before = f.wait_run(held, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    f.wait_until(DEADLINE, "the start line of the held run", || {
        !lines(&start_file).is_empty()
    });
    d1.kill();

    let d2 = f.start_daemon();
    let epoch2 = wait_epoch(&f, d2.pid(), epoch1);
    eprintln!("epochs {epoch1} then {epoch2}");

    // The sibling is queued first; a run outside the namespace then goes through — proof that
    // the EVALs that saw the sibling queued did happen.
    let sibling = f.enqueue("sibling");
    let free = f.enqueue("free");
    let r = f.wait_terminal(free);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_stays_queued(
        &f,
        sibling,
        "namespace ops (cap 1) is taken by the adopted run",
    );

    let r = f.run(held);
    assert_eq!(
        status_of(&r),
        "running",
        "the adopted run is still running: {r}"
    );
    assert_eq!(
        r["pid"], before["pid"],
        "same command process (adopted): {r}"
    );
    assert_eq!(
        lines(&start_file),
        [format!("start {held}")],
        "started again after restart"
    );
    assert!(
        !f.file("sibling.start").exists(),
        "the sibling ran over the namespace cap"
    );
    let s = f.status();
    assert_eq!(s["namespaces"]["ops"]["active"], 1, "{s}");

    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "failed", "{r}");
    assert_eq!(r["exit_code"], 3, "the real exit code: {r}");

    let r = f.wait_terminal(sibling);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    let held_end = lines(&f.file("held.end"));
    let sibling_start = lines(&f.file("sibling.start"));
    assert_eq!(held_end.len(), 1, "{held_end:?}");
    assert_eq!(sibling_start.len(), 1, "{sibling_start:?}");
    assert!(
        stamp(&sibling_start[0]) >= stamp(&held_end[0]),
        "the sibling started before the adopted run ended: {sibling_start:?} {held_end:?}"
    );
    assert_eq!(lines(&start_file), [format!("start {held}")]);
    assert_eq!(f.runs().len(), 3, "no retry or extra run: {:#?}", f.runs());
    assert_check_ok(&f);
}

// ---------------------------------------------------------------------------------------------
// 3. The command ends while no daemon runs.

#[test]
fn restart_while_daemon_down_finalizes_real_status() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.held]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                5
            )
        )
    });
    let start_file = f.file("held.start");
    let mut d1 = f.start_daemon();
    let held = f.enqueue("held");
    f.wait_status(held, "running");
    f.wait_until(DEADLINE, "the start line", || {
        !lines(&start_file).is_empty()
    });
    d1.kill();

    std::fs::write(f.file("GO"), "").unwrap();
    let exit_file = run_dir(&f, held).join("exit");
    f.wait_until(DEADLINE, "the shim's exit record", || exit_file.exists());
    // The shim writes the record before it exits; wait until it and the command are gone too,
    // so that the next daemon really finds the run ended, not alive.
    f.wait_until(DEADLINE, "the shim and the command to exit", || {
        others(&f, &[]).is_empty()
    });
    // Nothing recorded the end yet, and that is no violation: it awaits the next daemon.
    let r = f.run(held);
    assert_eq!(status_of(&r), "running", "{r}");
    let out = f.cmd(&["check", "--json"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        report["awaiting_finalize"],
        serde_json::json!([held]),
        "{report}"
    );

    let _d2 = f.start_daemon();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "failed", "{r}");
    assert_eq!(r["exit_code"], 5, "the real exit code: {r}");
    assert_eq!(r["attempt"], 1, "{r}");
    assert_eq!(
        lines(&start_file),
        [format!("start {held}")],
        "started again after restart"
    );
    assert_eq!(lines(&f.file("held.end")).len(), 1);
    assert_eq!(f.runs().len(), 1, "{:#?}", f.runs());
    assert_check_ok(&f);
}

// ---------------------------------------------------------------------------------------------
// 4 and 5. The brief's failure 2: another connection holds the write lock.

/// Six projects recording their runs, a global cap of 2; an external connection holds
/// `BEGIN IMMEDIATE` for `hold` once the first run is running. Returns the daemon's stderr.
fn busy_database(hold: Duration) -> String {
    const CAP: usize = 2;
    let f = Fleet::with(|dir| {
        let cmd = sh(&recorder_script(&dir.join("records"), "0.5"));
        let mut t = format!("max_concurrency = {CAP}\n");
        for i in 0..6 {
            t += &format!("[projects.p{i}]\ncommand = {cmd}\n");
        }
        t
    });
    let ids: Vec<i64> = (0..6).map(|i| f.enqueue(&format!("p{i}"))).collect();
    let mut d = f.start_daemon();
    f.wait_until(DEADLINE, "a first run to be running", || {
        f.runs().iter().any(|r| r["status"] == "running")
    });

    // The scenario: hold the write lock for a measured time (not a synchronisation sleep).
    let mut conn = rusqlite::Connection::open(f.state_dir().join("fleet.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(60)).unwrap();
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("BEGIN IMMEDIATE");
    let held_at = Instant::now();
    let mut blocked_exit = false;
    while held_at.elapsed() < hold {
        d.assert_alive();
        // Runs that ended while the lock is held cannot be finalized: their shim's exit record
        // is there, the database still says active. Proof the hold really blocks the daemon.
        if !blocked_exit {
            blocked_exit = f.runs().iter().any(|r| {
                matches!(status_of(r), "starting" | "running")
                    && run_dir(&f, r["id"].as_i64().unwrap()).join("exit").exists()
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stderr_during_hold = d.stderr();
    tx.rollback().expect("ROLLBACK");
    drop(conn);
    eprintln!("held the write lock for {:?}", held_at.elapsed());
    assert!(
        blocked_exit,
        "no ended run waited for the lock: the hold did not block the daemon\n{}",
        f.diagnostics()
    );

    f.wait_until(Duration::from_secs(120), "all six runs to end", || {
        let runs = f.runs();
        runs.len() == 6 && runs.iter().all(is_terminal)
    });
    d.assert_alive();
    let runs = f.runs();
    assert_eq!(runs.len(), 6, "{runs:#?}");
    for r in &runs {
        assert_eq!(status_of(r), "succeeded", "{r}");
        assert_eq!(r["exit_code"], 0, "{r}");
        assert_eq!(r["attempt"], 1, "{r}");
    }

    let records = read_records(&f.file("records"));
    // `max_overlap` panics if any run id started (or ended) twice.
    let overlap = max_overlap(&records);
    let started: Vec<i64> = records
        .iter()
        .filter(|r| r.start)
        .map(|r| r.run_id)
        .collect();
    assert_eq!(
        started.len(),
        6,
        "each run started exactly once: {records:#?}"
    );
    assert_eq!(
        started.iter().copied().collect::<BTreeSet<_>>(),
        ids.iter().copied().collect::<BTreeSet<_>>()
    );
    assert_eq!(records.len(), 12, "{records:#?}");
    if let Err(e) = overlap.check(CAP, &[]) {
        panic!("{e}");
    }
    eprintln!("observed max overlap {overlap:?}");
    assert_check_ok(&f);
    d.assert_alive();
    stderr_during_hold
}

#[test]
fn failure2_busy_database_8s() {
    busy_database(Duration::from_secs(8));
}

#[test]
fn failure2_busy_database_20s() {
    let stderr = busy_database(Duration::from_secs(20));
    const WARNING: &str = "EVAL could not finish; retrying later";
    let n = stderr.lines().filter(|l| l.contains(WARNING)).count();
    eprintln!("{n} EVAL retry warnings during the hold");
    assert!(
        n >= 1,
        "a 20 s hold (longer than the busy timeout) must be logged as a failed EVAL retried \
         later; daemon stderr during the hold:\n{stderr}"
    );
    // Retried on a backoff, never in a spin: each attempt waits out the busy timeout or a
    // doubling backoff, so a 20 s hold leaves a handful of warnings, not hundreds.
    assert!(n < 40, "{n} failed EVALs in 20 s: a spin?\n{stderr}");
}

// ---------------------------------------------------------------------------------------------
// 6. The brief's failure 3 (first half): one daemon per state directory.

#[test]
fn failure3_second_daemon_refused() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.held]\ncommand = {}\n[projects.hello]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                0
            ),
            sh("echo hello"),
        )
    });
    let mut d = f.start_daemon();
    let epoch = wait_epoch(&f, d.pid(), 0);
    // A run in flight: the refused daemon must not touch it (no recovery, no takeover).
    let held = f.enqueue("held");
    f.wait_status(held, "running");

    let mut c = f.command();
    c.arg("daemon").env("RUST_LOG", "info");
    let t = Instant::now();
    let out = run_with_deadline(c, Duration::from_secs(30));
    eprintln!("second daemon refused in {:?}", t.elapsed());
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains(&d.pid().to_string()),
        "the refusal should name the holder's pid {}: {out:?}",
        d.pid()
    );
    d.assert_alive();
    let (epoch_after, pid_after) = daemon_epoch_pid(&f);
    assert_eq!(pid_after, d.pid() as i64);
    assert_eq!(
        epoch_after, epoch,
        "the refused daemon must not take an epoch"
    );
    assert_eq!(status_of(&f.run(held)), "running");

    // The first daemon still does its work.
    let hello = f.enqueue("hello");
    let r = f.wait_terminal(hello);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(f.logs(hello), "hello\n");
    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(lines(&f.file("held.start")), [format!("start {held}")]);
    d.assert_alive();
    let (_, pid_after) = daemon_epoch_pid(&f);
    assert_eq!(pid_after, d.pid() as i64);
    assert_check_ok(&f);
}

// ---------------------------------------------------------------------------------------------
// 7 and 8. Crashes injected with failpoints.

/// The tombstone trap: a shim spawned just before the daemon died, but late to take its lock,
/// must not start a run that recovery already gave up and requeued.
#[test]
fn late_shim_finds_tombstone_and_does_not_start() {
    const LATE_MS: u64 = 3000;
    let f = Fleet::with(|dir| {
        format!(
            "[projects.once]\ncommand = {}\n",
            quick_command(&dir.join("once.start"))
        )
    });
    let start_file = f.file("once.start");
    let failpoints = format!("shim-before-lock=sleep({LATE_MS});daemon-after-spawn=return");
    let mut d1 = f.start_daemon_env(&[("FAILPOINTS", &failpoints)]);
    let id = f.enqueue("once");
    wait_daemon_abort(
        &f,
        &mut d1,
        id,
        "the daemon to abort after spawning the shim",
    );
    let aborted_at = Instant::now();
    // The late shim is asleep before its lock.
    let late_shims = others(&f, &[]);
    assert!(!late_shims.is_empty(), "the late shim should be alive");

    let d2 = f.start_daemon();
    let recovered_in = aborted_at.elapsed();
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(r["attempt"], 1, "requeued as the same attempt: {r}");
    // Wait until the late shim has woken, found the tombstone and exited (and anything it
    // might have started has ended).
    f.wait_until(DEADLINE, "the late shim to exit", || {
        others(&f, &[d2.pid()]).is_empty()
    });
    eprintln!(
        "new daemon up {recovered_in:?} after the abort; late shim gone {:?} after it",
        aborted_at.elapsed()
    );

    // The trap was really exercised: recovery tombstoned the first claim while the shim slept.
    let tombstones = run_dir(&f, id).join("tombstones");
    assert!(
        tombstones.exists(),
        "recovery left no tombstone (did the new daemon recover after the shim woke, \
         {recovered_in:?} > {LATE_MS} ms?)\n{}",
        f.diagnostics()
    );
    let started = lines(&start_file);
    assert_eq!(
        started.len(),
        1,
        "the run started {} times (the late shim ignored the tombstone?): {started:?}\n{}",
        started.len(),
        f.diagnostics()
    );
    assert!(
        started[0].starts_with(&format!("start {id} ")),
        "{started:?}"
    );
    let late = std::fs::read_to_string(f.file("daemon-0.stderr")).unwrap_or_default();
    assert!(
        late.contains("was given up by recovery; not starting"),
        "the late shim should say it found the tombstone:\n{late}"
    );
    assert_eq!(f.runs().len(), 1, "{:#?}", f.runs());
    assert_check_ok(&f);
}

#[test]
fn crash_after_claim_requeues_same_attempt() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.once]\ncommand = {}\n",
            quick_command(&dir.join("once.start"))
        )
    });
    let start_file = f.file("once.start");
    let mut d1 = f.start_daemon_env(&[("FAILPOINTS", "daemon-after-claim=return")]);
    let id = f.enqueue("once");
    wait_daemon_abort(&f, &mut d1, id, "the daemon to abort after the claim");
    // The claim is committed, nothing was spawned.
    let r = f.run(id);
    assert_eq!(status_of(&r), "starting", "{r}");
    assert!(others(&f, &[]).is_empty(), "nothing may have been spawned");
    assert!(!start_file.exists());

    let _d2 = f.start_daemon();
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["attempt"], 1, "the same attempt, not a retry: {r}");
    assert_eq!(r["trigger"], "manual", "{r}");
    assert_eq!(f.runs().len(), 1, "{:#?}", f.runs());
    let started = lines(&start_file);
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(
        started[0].starts_with(&format!("start {id} ")),
        "{started:?}"
    );
    assert!(
        run_dir(&f, id).join("tombstones").exists(),
        "recovery should have tombstoned the first claim"
    );
    assert_check_ok(&f);
}

/// The brief's failure 1 at the daemon's level: the database records a run as active that the
/// slot pool cannot hold (recovery cannot read its run files, so it is neither adopted nor
/// settled). The packers must still count it — they see merge(pool, DB), not the pool — so under
/// a global cap of 1 nothing else starts. Goes red if the daemon hands the packers its pool alone.
#[test]
fn failure1_db_active_run_unknown_to_the_pool_still_counts() {
    let f = Fleet::new(
        "max_concurrency = 1\n\
         [projects.held]\ncommand = [\"true\"]\n\
         [projects.other]\ncommand = [\"true\"]\n",
    );
    let held = f.enqueue("held");
    {
        // Another writer (as a restored backup or a crashed daemon of another build might leave
        // it): run `held` is active, and its run folder is not a folder at all.
        let db = rusqlite::Connection::open(f.state_dir().join("fleet.db")).unwrap();
        db.execute(
            "UPDATE runs SET status = 'running', claim_token = 7, started_at = 1 WHERE id = ?1",
            [held],
        )
        .unwrap();
        let runs = f.state_dir().join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        std::fs::write(runs.join(held.to_string()), "not a run folder").unwrap();
    }
    let _d = f.start_daemon();
    let other = f.enqueue("other");
    assert_stays_queued(
        &f,
        other,
        "the global cap of 1 is taken by a run only the database knows",
    );
    assert_eq!(status_of(&f.run(held)), "running");
}
