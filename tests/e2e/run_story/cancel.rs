//! An operator's cancel is final, and the record says what happened: no attempt starts after a
//! cancel was accepted; a command that ended on its own keeps its real status, with a note
//! saying the cancel came too late; a command stopped by the cancel ends `cancelled`.

use super::{gated, open_gate, starts, stop, wait_ended_unrecorded};
use crate::common::*;

/// A project that may be retried twice at once, whose command waits for the gate and exits
/// `code`.
fn retried(code: i32) -> Fleet {
    Fleet::with(|dir| {
        format!(
            "[projects.flaky]\ncommand = {}\nretries = 2\nretry_backoff = \"0s\"\n",
            gated(dir, code)
        )
    })
}

/// The daemon is stopped while the run is running, the operator cancels it (accepted), and the
/// command then exits 1 by itself before any daemon could stop it. The next daemon records the
/// real end (`failed`, exit 1) and starts no further attempt: a cancel, once accepted, is final.
#[test]
fn a_cancel_accepted_while_the_daemon_is_down_stops_every_retry() {
    let f = retried(1);
    let mut d = f.start_daemon();
    let id = f.enqueue("flaky");
    f.wait_status(id, "running");
    stop(&f, &mut d);

    let out = f.cmd_ok(&["cancel", &id.to_string()]);
    assert!(out.contains("cancel requested"), "{out}");
    open_gate(&f);
    wait_ended_unrecorded(&f, id);

    let _d = f.start_daemon();
    let r = f.wait_terminal(id);
    // A retry is queued in the same transaction that records the end: none now means none ever.
    let runs = f.runs();
    assert_eq!(
        runs.len(),
        1,
        "an attempt was queued after the cancel: {runs:#?}"
    );
    assert_eq!(status_of(&r), "failed", "the real status: {r}");
    assert_eq!(r["exit_code"], 1, "{r}");
    assert_eq!(
        r["reason"],
        "cancel requested while it ran, but it ended before the cancel reached it; \
         no retry after a cancel",
        "{r}"
    );
    // One start: the command ran once.
    assert_eq!(starts(&f), [format!("start {id}")], "{}", f.diagnostics());
    assert_check_ok(&f);
}

/// The command succeeded while no daemon ran; the operator, seeing `running`, cancels it. The
/// record keeps the real status and says the cancel came after the end.
#[test]
fn a_cancel_after_the_command_ended_keeps_the_real_status_and_says_so() {
    let f = retried(0);
    let mut d = f.start_daemon();
    let id = f.enqueue("flaky");
    f.wait_status(id, "running");
    stop(&f, &mut d);
    open_gate(&f);
    wait_ended_unrecorded(&f, id);

    // The database still says running: nobody recorded the end yet, so the cancel is accepted.
    let out = f.cmd_ok(&["cancel", &id.to_string()]);
    assert!(out.contains("cancel requested"), "{out}");

    let _d = f.start_daemon();
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["reason"], "cancel requested after it ended", "{r}");
    assert_eq!(f.runs().len(), 1, "{:#?}", f.runs());
    assert_eq!(starts(&f).len(), 1);
    assert_check_ok(&f);
}

/// A cancel accepted while the daemon was down, of a command still running when the next daemon
/// starts: the daemon adopts it, stops it, and records `cancelled` with the operator's reason —
/// and no retry.
#[test]
fn a_cancel_of_a_run_still_alive_at_restart_stops_it_for_good() {
    let f = retried(1);
    let mut d = f.start_daemon();
    let id = f.enqueue("flaky");
    f.wait_status(id, "running");
    stop(&f, &mut d);
    f.cmd_ok(&["cancel", &id.to_string()]);

    let _d = f.start_daemon();
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "cancelled", "{r}");
    assert_eq!(r["reason"], "cancelled by operator", "{r}");
    assert_eq!(f.runs().len(), 1, "{:#?}", f.runs());
    assert_eq!(starts(&f).len(), 1);
    assert_check_ok(&f);
}

/// A termination signal fleet did not send (an operator's `kill`, a service manager stopping
/// everything) stops the command, and the run ends `cancelled`; its note must not pretend an
/// operator cancelled it through fleet.
#[test]
fn a_stop_from_outside_fleet_is_not_recorded_as_an_operators_cancel() {
    let f = retried(1);
    let _d = f.start_daemon();
    let id = f.enqueue("flaky");
    f.wait_status(id, "running");
    let shim = run_records(&f, id)
        .started
        .expect("started record")
        .shim_pid;
    assert_eq!(
        shim_run_id(shim),
        Some(id),
        "pid {shim} is not run {id}'s shim"
    );
    send_signal(shim, Signal::TERM).unwrap();

    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "cancelled", "{r}");
    let reason = r["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("not sent by fleet"),
        "the note must say the stop came from outside fleet: {r}"
    );
    assert_eq!(f.runs().len(), 1, "{:#?}", f.runs());
    assert_check_ok(&f);
}
