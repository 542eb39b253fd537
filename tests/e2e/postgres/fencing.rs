//! One daemon per host name: a second daemon of the same host started on the same database
//! (from another state directory) takes over, and the first one, fenced by the epoch, stops
//! with a message saying so instead of writing over the newer daemon's work.

use super::{database_url, pg_fleet};
use crate::common::restart::*;
use crate::common::*;

#[test]
fn a_second_daemon_on_the_same_database_fences_the_first() {
    let Some(url) = database_url() else { return };
    // One marker for both: on a shared database the config in force is the published one (the
    // first daemon's), whichever daemon runs the command.
    let shared = tempfile::tempdir().unwrap();
    let marker = shared.path().join("p.start");
    let body =
        |_: &std::path::Path| format!("[projects.p]\ncommand = {}\n", quick_command(&marker));
    let first = pg_fleet(&url, body);
    let second = pg_fleet(&url, body);

    let mut d1 = first.start_daemon();
    let epoch1 = wait_epoch(&first, d1.pid(), 0);
    let d2 = second.start_daemon();
    let epoch2 = wait_epoch(&second, d2.pid(), epoch1);

    first.wait_until(DEADLINE, "the fenced daemon to stop", || {
        d1.try_exit().is_some()
    });
    let status = d1.try_exit().unwrap();
    assert_eq!(status.code(), Some(1), "{status}\n{}", d1.stderr());
    let said = d1.stderr();
    assert!(
        said.contains(&format!("epoch {epoch1} is stale"))
            && said.contains("daemon was taken over"),
        "the first daemon does not say it was fenced:\n{said}"
    );

    // The second daemon is in charge: a run queued from either side is run by it, once.
    let id = first.enqueue("p");
    let r = second.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    // Started once, by the second daemon (the first had stopped before the run was queued).
    assert_eq!(lines(&marker).len(), 1);
    eprintln!("epochs {epoch1} then {epoch2}");
}
