//! Crashes injected with failpoints: a shim that is late to take its lock finds recovery's
//! tombstone and does not start the run; a crash right after the claim requeues the same
//! attempt. Each run starts exactly once.

use std::time::Instant;

use crate::common::*;
use crate::helpers::*;

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
