//! The daemon's slots, as `fleet check` sees them: the daemon answers `slots` on its control
//! socket with the runs it supervises, and `check` reports a slot held for a run that is no
//! longer active, once it has stayed so a while (the daemon frees one at its next EVAL).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::common::restart::*;
use crate::common::*;

/// Asks the daemon listening on `socket` for its slots; the answer's line.
fn ask_slots(socket: &Path) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"slots\n").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line.trim_end().to_string()
}

/// While a run's command runs, the daemon's answer names it; once it ended, nothing.
#[test]
fn the_daemon_answers_slots_with_the_runs_it_supervises() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.held]\ncommand = {}\n",
            gated_command(&dir.join("start"), &dir.join("GO"), &dir.join("end"), 0)
        )
    });
    let _d = f.start_daemon();
    let id = f.enqueue("held");
    f.wait_status(id, "running");
    let socket = f.state_dir().join("daemon.sock");
    f.wait_until(DEADLINE, "the slot published", || {
        ask_slots(&socket) == format!("slots {id}")
    });
    std::fs::write(f.file("GO"), "").unwrap();
    assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    f.wait_until(DEADLINE, "the slot freed", || ask_slots(&socket) == "slots");
}

/// Runs `fleet check --json` on `f` while a stand-in for its daemon listens on the control
/// socket, answering its `n`th `slots` question (from 0) with `answer(n)`.
fn check_with(f: &Fleet, answer: impl Fn(usize) -> String + Sync) -> Value {
    let socket = f.state_dir().join("daemon.sock");
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut asked = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        let mut line = String::new();
                        let mut reader = BufReader::new(&conn);
                        if reader.read_line(&mut line).is_ok() && line.trim() == "slots" {
                            let _ = (&conn).write_all(format!("{}\n", answer(asked)).as_bytes());
                            asked += 1;
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        let _stop = StopOnDrop(&stop);
        check_report(f)
    })
}

/// A daemon (here a stand-in on its socket) that keeps a slot for a run that ended, whose lock
/// is free: `fleet check` reports `slot_without_active_run` for it — and nothing for a daemon
/// that holds none, nor for one that frees the slot within a few questions (its next EVAL).
#[test]
fn check_reports_a_slot_held_for_a_run_that_ended() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    let mut d = f.start_daemon();
    let id = f.enqueue("p");
    assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    d.kill();
    let report = check_with(&f, |_| format!("slots {id}"));
    assert_eq!(
        violation_kinds(&report),
        ["slot_without_active_run"],
        "{report}"
    );
    assert_eq!(report["violations"][0]["run_id"], id, "{report}");
    let report = check_with(&f, |_| "slots".into());
    assert!(violation_kinds(&report).is_empty(), "{report}");
    let report = check_with(&f, |n| {
        if n < 3 {
            format!("slots {id}")
        } else {
            "slots".into()
        }
    });
    assert!(
        violation_kinds(&report).is_empty(),
        "a slot freed at once: {report}"
    );
}

/// A slot whose run the database no longer holds as active, but whose shim still holds the
/// run's lock (its command runs on), is held on purpose — the command still takes its seat —
/// and is not reported as one held for nothing.
#[test]
fn check_does_not_report_a_slot_whose_shim_still_holds_the_run() {
    let f = Fleet::with(|dir| {
        format!(
            "[projects.held]\ncommand = {}\n",
            gated_command(&dir.join("start"), &dir.join("GO"), &dir.join("end"), 0)
        )
    });
    let mut d = f.start_daemon();
    let id = f.enqueue("held");
    f.wait_status(id, "running");
    // The shim outlives its daemon and keeps the run's lock; another writer ends the row.
    d.kill();
    outside_writer(&f)
        .execute(
            "UPDATE runs SET status = 'cancelled', finished_at = started_at WHERE id = ?1",
            [id],
        )
        .unwrap();
    let report = check_with(&f, |_| format!("slots {id}"));
    assert!(
        !violation_kinds(&report).contains(&"slot_without_active_run"),
        "{report}"
    );
    std::fs::write(f.file("GO"), "").unwrap();
}
