//! Crashes injected with failpoints: a shim that is late to take its lock finds recovery's
//! tombstone and does not start the run; a crash right after the claim requeues the same
//! attempt. Each run starts exactly once.

use std::time::{Duration, Instant};

use crate::common::restart::*;
use crate::common::*;

/// An install of project `once` (its command appends to `once.start`; `top`: keys before it)
/// whose first run's shim sleeps `late_ms` before its lock, its daemon aborted right after
/// spawning it: (the install, the run's id, when the daemon died). The late shim is alive.
fn with_a_late_shim(top: &str, late_ms: u64) -> (Fleet, i64, Instant) {
    let f = Fleet::with(|dir| {
        format!(
            "{top}[projects.once]\ncommand = {}\n",
            quick_command(&dir.join("once.start"))
        )
    });
    let failpoints = format!("shim-before-lock=sleep({late_ms});daemon-after-spawn=return");
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
    assert!(!others(&f, &[]).is_empty(), "the late shim should be alive");
    drop(d1);
    (f, id, aborted_at)
}

/// The tombstone trap: a shim spawned just before the daemon died, but late to take its lock,
/// must not start a run that recovery already gave up and requeued.
#[test]
fn late_shim_finds_tombstone_and_does_not_start() {
    const LATE_MS: u64 = 3000;
    let (f, id, aborted_at) = with_a_late_shim("", LATE_MS);
    let start_file = f.file("once.start");

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
    assert!(
        has_tombstone(&f, id),
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

/// The tombstone trap, later still: the late shim sleeps through the requeued run's end and its
/// prune. Prune must leave the tombstone (a run's record slot emptied whole would let the late
/// shim start the run a second time, long after it ended), and `fleet check` must take what it
/// leaves for what it is.
#[test]
fn late_shim_finds_tombstone_after_its_run_was_pruned() {
    const LATE_MS: u64 = 9000;
    // Prune keeps what ended in the last 30 ticks: 3 s at this tick.
    let top = "tick = \"100ms\"\nkeep_runs = 1\nkeep_for = \"off\"\n";
    let (f, id, aborted_at) = with_a_late_shim(top, LATE_MS);
    let start_file = f.file("once.start");

    let d2 = f.start_daemon();
    assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    // A newer run of the project, then a prune: the first run is forgotten, its files go.
    let next = f.enqueue("once");
    assert_eq!(status_of(&f.wait_terminal(next)), "succeeded");
    f.wait_until(DEADLINE, "the first run to be pruned", || {
        f.cmd_ok(&["prune"]);
        !f.cmd_ok(&["runs", "--json"])
            .contains(&format!("\"id\":{id},"))
    });
    assert!(
        aborted_at.elapsed() < Duration::from_millis(LATE_MS),
        "the late shim woke before the prune ({:?}): the test proves nothing",
        aborted_at.elapsed()
    );
    f.wait_until(DEADLINE, "the late shim to exit", || {
        others(&f, &[d2.pid()]).is_empty()
    });
    let started = lines(&start_file);
    let first: Vec<&String> = started
        .iter()
        .filter(|l| l.starts_with(&format!("start {id} ")))
        .collect();
    assert_eq!(
        first.len(),
        1,
        "run {id} started {} times (the late shim found no tombstone after the prune): \
         {started:?}\n{}",
        first.len(),
        f.diagnostics()
    );
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
        has_tombstone(&f, id),
        "recovery should have tombstoned the first claim"
    );
    assert_check_ok(&f);
}

/// Whether process `pid` waits for run `id`'s slot lock: someone waits (blocked, not holding)
/// for an OFD lock over the slot's bytes — /proc/locks, where a waiter's line carries `->`, the
/// file as `MAJOR:MINOR:INODE` and the range, but no pid for an OFD lock — and `pid` is in
/// `fcntl(_, F_OFD_SETLKW, _)` (/proc/<pid>/syscall).
fn waits_at_slot_lock(f: &Fleet, id: i64, pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let files = runrecord::RunFiles::new(&f.state_dir(), id);
    let range = files.record_slot().range();
    let Ok(ino) = std::fs::metadata(files.lock_path()).map(|m| m.ino()) else {
        return false;
    };
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let someone_waits = locks.lines().any(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        let Some(at) = fields.iter().position(|f| *f == "->") else {
            return false;
        };
        // -> OFDLCK ADVISORY WRITE -1 <maj:min:ino> <first byte> <last byte>
        let file_ino = fields
            .get(at + 5)
            .and_then(|f| f.rsplit(':').next()?.parse::<u64>().ok());
        let first = fields.get(at + 6).and_then(|f| f.parse::<u64>().ok());
        fields.get(at + 1) == Some(&"OFDLCK") && file_ino == Some(ino) && first == Some(range.start)
    });
    // fcntl is system call 72 on x86-64 and 25 on arm64; F_OFD_SETLKW is 38.
    let fcntl = if cfg!(target_arch = "aarch64") {
        "25"
    } else {
        "72"
    };
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    let fields: Vec<&str> = syscall.split_whitespace().collect();
    someone_waits && fields.first() == Some(&fcntl) && fields.get(2) == Some(&"0x26")
}

/// The tombstone trap with the late shim held *at* its lock: it arrives while recovery holds the
/// run's lock but has not yet written the tombstone (recovery is held there by a failpoint), and
/// waits for the lock. It must look for the tombstone only once it holds the lock — then it finds
/// it and does not start. A shim that looked before taking the lock (while there was no
/// tombstone yet) would start the run a second time: this test goes red, where
/// `late_shim_finds_tombstone_and_does_not_start` (tombstone written before the shim arrives)
/// stays green.
#[test]
fn late_shim_waiting_at_the_lock_finds_the_tombstone() {
    const LATE_MS: u64 = 4000;
    const HOLD_MS: u64 = 8000;
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
    let late = others(&f, &[]);
    assert_eq!(
        late.len(),
        1,
        "one late shim, asleep before its lock: {late:?}"
    );

    let hold = format!("recovery-before-tombstone=sleep({HOLD_MS})");
    let d2 = f.start_daemon_env(&[("FAILPOINTS", &hold)]);
    f.wait_until(DEADLINE, "the late shim to wait at the run's lock", || {
        let waiting = waits_at_slot_lock(&f, id, late[0]);
        assert!(
            waiting || !f.file("once.start").exists(),
            "the late shim started the run instead of waiting at the lock (did the new \
             daemon take {:?} > {LATE_MS} ms to recover?)\n{}",
            aborted_at.elapsed(),
            f.diagnostics()
        );
        waiting
    });
    assert!(
        !has_tombstone(&f, id),
        "recovery holds the lock and has not written the tombstone yet"
    );

    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(r["attempt"], 1, "requeued as the same attempt: {r}");
    f.wait_until(DEADLINE, "the late shim to exit", || {
        others(&f, &[d2.pid()]).is_empty()
    });
    let started = lines(&start_file);
    assert_eq!(
        started.len(),
        1,
        "the run started {} times (the late shim looked for the tombstone before its lock?): \
         {started:?}\n{}",
        started.len(),
        f.diagnostics()
    );
    let late_log = std::fs::read_to_string(f.file("daemon-0.stderr")).unwrap_or_default();
    assert!(
        late_log.contains("was given up by recovery; not starting"),
        "the late shim should say it found the tombstone:\n{late_log}"
    );
    assert_eq!(f.runs().len(), 1, "{:#?}", f.runs());
    assert_check_ok(&f);
}

/// A shim spawned just before its daemon died, whose `running` report no daemon wrote: the
/// next daemon adopts it and records it `running` with its command's pid (from the run's
/// `running` record), rather than leaving a live command `starting`.
#[test]
fn adopted_claim_still_starting_is_recorded_running() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.held]\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                0
            )
        )
    });
    let mut d1 = f.start_daemon_env(&[("FAILPOINTS", "daemon-after-spawn=return")]);
    let id = f.enqueue("held");
    wait_daemon_abort(
        &f,
        &mut d1,
        id,
        "the daemon to abort after spawning the shim",
    );
    assert_eq!(status_of(&f.run(id)), "starting");
    let mut pid = None;
    f.wait_until(DEADLINE, "the orphaned shim's running record", || {
        pid = run_records(&f, id).running.map(|r| i64::from(r.pid));
        pid.is_some()
    });

    let _d2 = f.start_daemon();
    let r = f.wait_run(id, "the adopted run recorded running", |r| {
        r["status"] == "running"
    });
    assert_eq!(r["pid"].as_i64(), pid, "the command's pid: {r}");
    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(lines(&f.file("held.start")).len(), 1);
    assert_check_ok(&f);
}
