//! A run's record file holding a complete line that is not a record: the line is reported
//! (ERROR, naming the run, the file and the line's number) and hides nothing around it, so the
//! exit record after it gives the run its real end; `fleet check` reports the bad line and goes
//! on.

use std::io::Write;

use crate::common::*;
use crate::{gated, open_gate};

/// Garbage appended to the lock file while the command runs; the shim then appends its exit
/// record (code 7) after it. The run ends `failed`, exit 7 — not `lost` "the shim died".
#[test]
fn a_bad_line_before_the_exit_record_hides_nothing() {
    let f = Fleet::with(|dir| format!("[projects.p]\ncommand = {}\n", gated(dir, 7)));
    let d = f.start_daemon();
    let id = f.enqueue("p");
    f.wait_status(id, "running");
    let lock = f.state_dir().join(format!("runs/{id}/lock"));
    let lines = std::fs::read_to_string(&lock).unwrap().lines().count();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&lock)
        .unwrap();
    file.write_all(b"garbage line\n").unwrap();
    open_gate(&f);

    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "failed", "{r}\n{}", f.diagnostics());
    assert_eq!(r["exit_code"], 7, "{r}");
    let said = format!("line {} of {}: not a run record", lines + 1, lock.display());
    let log = d.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains(&format!("run={id}")) && l.contains(&said)),
        "no ERROR naming run {id} and {said:?}:\n{log}"
    );
}
