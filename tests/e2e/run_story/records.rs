//! A run's record file holding a complete line that is not a record: the line is reported
//! (ERROR, naming the run, the file and the line's number) and hides nothing around it, so the
//! exit record after it gives the run its real end; `fleet check` reports the bad line and goes
//! on.

use super::{gated, open_gate};
use crate::common::*;

/// Garbage appended to the run's slot while the command runs; the shim then appends its exit
/// record (code 7) after it. The run ends `failed`, exit 7 — not `lost` "the shim died".
#[test]
fn a_bad_line_before_the_exit_record_hides_nothing() {
    let f = Fleet::with(|dir| format!("[projects.p]\ncommand = {}\n", gated(dir, 7)));
    let d = f.start_daemon();
    let id = f.enqueue("p");
    f.wait_status(id, "running");
    let lock = lock_path(&f, id);
    let text = slot_text(&f, id);
    let lines = text.lines().count();
    overwrite_slot(&f, id, format!("{text}garbage line\n").as_bytes());
    open_gate(&f);

    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "failed", "{r}\n{}", f.diagnostics());
    assert_eq!(r["exit_code"], 7, "{r}");
    let said = format!(
        "line {} of {} (record slot of run {id}): not a run record",
        lines + 1,
        lock.display()
    );
    let log = d.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains(&format!("run={id}")) && l.contains(&said)),
        "no ERROR naming run {id} and {said:?}:\n{log}"
    );
}

/// A finished run's exit record edited to say another end than the database holds: `fleet
/// check` reports the disagreement (and exits non-zero); a bad line in another run's file is
/// reported too, by its line number, without the check stopping at it.
#[test]
fn check_compares_exit_records_and_goes_past_bad_lines() {
    let f = Fleet::new(&format!(
        "[projects.p]\ncommand = {}\n[projects.q]\ncommand = {}\n",
        sh("exit 3"),
        sh("exit 0")
    ));
    let _d = f.start_daemon();
    let first = f.enqueue("p");
    assert_eq!(status_of(&f.wait_terminal(first)), "failed");
    let second = f.enqueue("q");
    assert_eq!(status_of(&f.wait_terminal(second)), "succeeded");
    assert_check_ok(&f);

    // The first run's slot holds a bad line; the second's exit record is edited.
    let lock = |id: i64| lock_path(&f, id);
    let text = slot_text(&f, first);
    overwrite_slot(&f, first, format!("{text}garbage line\n").as_bytes());
    let bad_line = slot_text(&f, first).lines().count();
    let text = slot_text(&f, second);
    assert!(text.contains("\"code\":0"), "{text}");
    overwrite_slot(
        &f,
        second,
        text.replace("\"code\":0", "\"code\":5").as_bytes(),
    );

    let out = f.cmd(&["check"]);
    assert_ne!(out.code(), Some(0), "{}", out.stdout);
    let said = format!(
        "violation: unreadable_file: line {bad_line} of {} (record slot of run {first}): not a run record (",
        lock(first).display()
    );
    assert!(
        out.stdout.contains(&said),
        "{said:?} missing:\n{}",
        out.stdout
    );
    assert!(!out.stdout.contains("column"), "{}", out.stdout);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("violation: exit_record_mismatch: ")
                && l.contains(&format!("run {second} "))
                && l.contains("exit code 5")),
        "{}",
        out.stdout
    );
}
