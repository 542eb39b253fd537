//! End-to-end tests of the story a run's record tells: its status, its note, its retries and the
//! daemon's log say what really happened to it, on the real `fleet` binary.
//!
//! - `cancel`: an operator's cancel is final — no attempt after an accepted cancel, whenever it
//!   was accepted (while the run was queued, running, or after its command ended with no daemon
//!   there to record it) — and the note says what happened;
//! - `log`: the daemon logs every claim, start, end and spawn failure, with plain field values,
//!   and `fleet check` prints plain values too.
//!
//! Commands here are gated: they record their start, wait for a file the test creates, then
//! exit, so a run lasts exactly as long as the test wants. Run with
//! `cargo test --all-features --test e2e run_story::`.

mod cancel;
mod log;
mod records;

use std::path::Path;

use crate::common::*;

/// A command that appends `start $FLEET_RUN_ID` to `<dir>/starts`, waits until `<dir>/GO`
/// exists, then exits `code`.
pub fn gated(dir: &Path, code: i32) -> String {
    sh(&format!(
        "echo start $FLEET_RUN_ID >> {starts}; \
         while [ ! -e {go} ]; do sleep 0.05; done; \
         exit {code}",
        starts = shell_quote(&dir.join("starts")),
        go = shell_quote(&dir.join("GO")),
    ))
}

/// The lines of `<dir>/starts`: one per start of a command.
pub fn starts(f: &Fleet) -> Vec<String> {
    std::fs::read_to_string(f.file("starts"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Opens the gate: every gated command ends.
pub fn open_gate(f: &Fleet) {
    std::fs::write(f.file("GO"), "").unwrap();
}

/// Stops the daemon with SIGTERM and waits until it has exited (its shims keep running).
pub fn stop(f: &Fleet, d: &mut Daemon<'_>) {
    d.signal(Signal::TERM);
    f.wait_until(DEADLINE, "the daemon to exit on SIGTERM", || {
        d.try_exit().is_some()
    });
}

/// Waits until run `id`'s shim has written its exit record and every process of this test
/// (shims, commands) is gone, so that the next daemon finds the run ended, not alive.
pub fn wait_ended_unrecorded(f: &Fleet, id: i64) {
    f.wait_until(DEADLINE, "the shim's exit record", || {
        has_record(f, id, "exit")
    });
    let me = std::process::id() as i32;
    f.wait_until(DEADLINE, "the shim and the command to exit", || {
        marked_pids(&f.marker)
            .into_iter()
            .all(|p| p == me || is_fork_server(p))
    });
}
