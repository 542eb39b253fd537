//! A schedule whose runs the database refuses (another program's trigger, say) waits alone
//! while everything else goes on and the daemon stays healthy: `/metrics` says how long its
//! occurrence has been overdue, so that an alert can fire on it, and a working schedule reads 0.

use super::metrics::{by_label, scrape};
use crate::common::http_client::http_address;
use crate::common::*;

#[test]
fn a_schedule_the_database_refuses_shows_as_overdue_in_metrics() {
    let f = Fleet::new(
        "http_listen = \"127.0.0.1:0\"\ntick = \"30s\"\n\
         [projects.bad]\ncommand = [\"true\"]\nschedule = \"*/1 * * * * *\"\n\
         [projects.good]\ncommand = [\"true\"]\nschedule = \"*/1 * * * * *\"\n\
         [projects.manual]\ncommand = [\"true\"]\n",
    );
    // Creates the database, then the other program's trigger.
    let first = f.enqueue("manual");
    f.db()
        .execute_batch(
            "CREATE TRIGGER refuse_bad BEFORE INSERT ON runs WHEN NEW.project = 'bad' \
             BEGIN SELECT RAISE(ABORT, 'refused by another program'); END",
        )
        .unwrap();
    let d = f.start_daemon();
    let addr = http_address(&d);
    assert_eq!(f.wait_terminal(first)["status"], "succeeded");
    f.wait_until(
        DEADLINE,
        "2 runs of the working schedule to succeed",
        || {
            f.runs_with(&["--project", "good", "--status", "succeeded"])
                .len()
                >= 2
        },
    );
    // The refused occurrence is moved ten minutes back rather than waited for: the daemon
    // leaves the row of a failing schedule as it was.
    let moved = f
        .db()
        .execute(
            "UPDATE schedules SET next_fire = next_fire - 600000 WHERE project = 'bad'",
            [],
        )
        .unwrap();
    assert_eq!(moved, 1);
    let s = scrape(&addr);
    let overdue = by_label(&s, "fleet_schedule_overdue_seconds", "project");
    assert!(
        overdue.get("bad").is_some_and(|&v| v >= 600.0),
        "{overdue:?}"
    );
    // A working schedule's next occurrence is ahead of the clock, or handled within
    // milliseconds of its time.
    assert!(overdue.get("good").is_some_and(|&v| v < 5.0), "{overdue:?}");
    assert!(!overdue.contains_key("manual"), "{overdue:?}");
    assert_eq!(
        by_label(&s, "fleet_daemon_healthy", "").get(""),
        Some(&1.0),
        "the daemon itself is healthy"
    );
}
