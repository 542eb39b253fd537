//! A command that ends while no daemon runs: its exit record waits (no violation meanwhile), and
//! the next daemon settles the run with its real status, without starting it again.

use serde_json::Value;

use crate::common::restart::*;
use crate::common::*;

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
    f.wait_until(DEADLINE, "the shim's exit record", || {
        has_record(&f, held, "exit")
    });
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
