//! Beyond one crash per failpoint: the recovery failpoints chained on the same claims, the
//! late-shim trap, a daemon restarted right after a crash, and a restart of the machine.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::checks::*;
use super::crashy::{poll, Crashy};
use super::CAP;
use crate::common::*;

/// The three recovery failpoints one after the other on the same claims, then a clean daemon.
#[test]
fn recovery_failpoints_chained() {
    let s = scenario();
    let f = &s.f;
    let mut first = Crashy::start(f, "daemon-after-claim=return");
    first.wait_abort(f);
    let claimed = in_status(f, &s.ids, "starting");
    assert_eq!(claimed.len(), CAP, "{}", first.describe());
    let mut crashes = vec![first];
    for fp in [
        "recovery-before-tombstone",
        "recovery-after-tombstone",
        "recovery-before-apply",
    ] {
        let mut d = Crashy::start(f, &format!("{fp}=return"));
        d.wait_abort(f);
        assert_eq!(
            in_status(f, &s.ids, "starting"),
            claimed,
            "{}",
            d.describe()
        );
        crashes.push(d);
    }
    let refs: Vec<&Crashy> = crashes.iter().collect();
    finish(&s, "recovery chain", Expect::FirstAttempt, &refs);
    assert_eq!(requeued(f), claimed);
}

/// A restart of the machine between a claim and its shim's `started` record: that record is
/// written without waiting for the disk, so after a restart its absence proves nothing, and
/// the claim must end `lost` (retried, since the projects have retries), never be queued again
/// as a claim that never started. The daemon that claims runs in one boot (a test boot id) and
/// dies right after its claims' commit, before any shim; the next one runs in another (the
/// machine's own). Queued again, a claim cut short after its command started would start it a
/// second time as the same attempt.
#[test]
fn claims_a_machine_restart_cut_short_end_lost_not_queued_again() {
    let s = scenario();
    let f = &s.f;
    let mut first = Crashy::start_with(
        f,
        "daemon-after-claim=return",
        &[("FLEET_TEST_BOOT_ID", "a-boot-before-the-restart")],
    );
    first.wait_abort(f);
    let claimed = in_status(f, &s.ids, "starting");
    assert_eq!(claimed.len(), CAP, "{}", first.describe());
    finish(
        &s,
        "machine restart",
        Expect::LostThenRetried { command_ran: false },
        &[&first],
    );
    assert!(requeued(f).is_empty(), "{:?}", requeued(f));
    let statuses = statuses(f);
    for id in &claimed {
        assert_eq!(statuses[id], "lost", "run {id}");
        let reason: String = f
            .db_read_only()
            .query_row("SELECT reason FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .unwrap();
        assert!(
            reason.contains("machine may have restarted"),
            "run {id}: {reason}"
        );
    }
}

/// The late-shim trap: a shim spawned but delayed before its lock looks exactly like one that
/// never will be. Recovery tombstones its claim and requeues the
/// run; the next daemon starts it again; when the late shim finally locks, it must find the
/// tombstone and not start the command — each run starts exactly once.
#[test]
fn late_shim_finds_the_tombstone_and_never_starts() {
    let s = scenario();
    let f = &s.f;
    let mut d = Crashy::start(f, "shim-before-lock=sleep(6000)");
    let mut late = BTreeMap::new();
    poll(
        f,
        &[&d],
        DEADLINE,
        "two shims, delayed before their lock",
        || {
            late = shims(f);
            late.len() == CAP
        },
    );
    d.kill();
    let late_runs: BTreeSet<i64> = late.values().copied().collect();
    let started = Instant::now();
    finish(&s, "late shim", Expect::FirstAttempt, &[&d]);
    // The restart must have beaten the late shims (6 s), or the trap was not exercised.
    assert_eq!(
        requeued(f),
        late_runs,
        "the late shims' claims must have been requeued as never started (restart took {:?})",
        started.elapsed()
    );
    for pid in late.keys() {
        assert!(process_gone(*pid), "late shim {pid} still alive");
    }
}

/// Restarting right after a crash must work: at most one start per attempt whatever instant the
/// daemon is killed at, and a restart that is refused keeps nothing of that promise.
///
/// The trap: a shim started by a fork of the daemon holds a copy of the daemon lock (opened
/// close-on-exec) from the fork until its exec. A daemon SIGKILLed in that window leaves an
/// orphan (parent 1, already `setsid`, still the daemon's command line) that holds the lock
/// until it gets to exec — on a loaded machine long enough that a daemon started at once would
/// exit 1 with "another fleet daemon (pid <the dead daemon>) holds the state directory". Before
/// the two guards below, about 2–14% of such restarts were refused here.
///
/// The guards: shims are forked by the fork server (crates/supervisor/src/shim/forkserver.rs),
/// forked from the daemon before it takes the lock, so that a forked shim never holds it; a shim
/// is exec'd from a fork of the daemon only when the fork server cannot fork it (gone, or the
/// request too large). And
/// `StateDir::lock_daemon` (crates/supervisor/src/statedir.rs) waits up to `HOLDER_GONE_WAIT`
/// for a lock whose named daemon is dead, instead of refusing at once.
///
/// Here a daemon with `shim-before-lock=return` spawns shims without pause (each aborts at once
/// and its claim is requeued), is SIGKILLed after a random 20–200 ms, and the next daemon is
/// started immediately: it must take the lock every time. `FLEET_RESTART_TRIES` (default 250, about 35 s).
#[test]
fn restart_right_after_a_crash_is_never_refused() {
    let tries: usize = std::env::var("FLEET_RESTART_TRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(250);
    let s = scenario();
    let f = &s.f;
    let lock = f.state_dir().join("daemon.lock");
    let mut seed = (std::process::id() as u64) << 17 | 0x9e37;
    let mut refusals = Vec::new();
    let began = Instant::now();
    for i in 0..tries {
        // Started without waiting for the lock: that is the point.
        let mut d = Crashy::spawn(f, "shim-before-lock=return");
        let pid = d.pid().to_string();
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(st) = d.try_exit() {
                refusals.push(format!(
                    "restart {i}: the daemon exited ({st}): {}",
                    d.stderr().trim()
                ));
                break;
            }
            let text = std::fs::read_to_string(&lock).unwrap_or_default();
            if text.split_whitespace().next() == Some(pid.as_str()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "restart {i}: daemon neither up nor gone\n{}",
                d.describe()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        if d.exited().is_some() {
            // Refused: let the holder go before the next try.
            wait_daemon_lock_released(&f.state_dir());
            continue;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // The scenario, not synchronisation: let it spawn shims a random while, then crash it.
        std::thread::sleep(Duration::from_millis(20 + seed % 181));
        d.kill();
    }
    eprintln!(
        "{tries} crash-restarts in {:.1}s: {} restarts refused",
        began.elapsed().as_secs_f64(),
        refusals.len()
    );
    assert!(
        refusals.is_empty(),
        "{} of {tries} daemons started right after a crash were refused although no daemon ran \
         (a half-spawned shim of the dead daemon held the lock):\n{}",
        refusals.len(),
        refusals.join("\n")
    );
}
