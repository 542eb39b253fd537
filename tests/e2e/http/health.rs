//! `/healthz` follows the loop's heartbeat: 200 while the loop turns; 503, saying why, once it
//! has not completed an EVAL for three ticks — here because another program holds the
//! database's write lock, so the EVAL that must record a run's end cannot finish — while the
//! listener itself keeps answering; 200 again once the lock is released.
//!
//! Why not SIGSTOP: a stopped daemon answers nothing at all (the kernel still accepts the
//! connection, then nobody reads it), so a prober sees a timeout, which is already "down". What
//! only `/healthz` can say is that a process that still answers has a loop that no longer
//! turns, and a database another program keeps locked is the common way to get there.

use std::time::Duration;

use super::gated;
use crate::common::http_client::{get, http_address};
use crate::common::*;

#[test]
fn healthz_is_503_while_the_loop_is_stuck_and_200_otherwise() {
    let f = Fleet::with(|dir| {
        format!(
            "http_listen = \"127.0.0.1:0\"\ntick = \"200ms\"\n[projects.p]\ncommand = {}\n",
            gated(dir, 0)
        )
    });
    let d = f.start_daemon();
    let addr = http_address(&d);
    f.wait_until(DEADLINE, "/healthz to answer 200", || {
        get(&addr, "/healthz").status == 200
    });
    let ok = get(&addr, "/healthz");
    assert!(ok.text().starts_with("ok:"), "{}", ok.text());

    let id = f.enqueue("p");
    f.wait_status(id, "running");
    // Another program takes the write lock; then the run ends: the EVAL that must write its
    // end waits on the lock (then backs off), and the loop completes no turn.
    let mut conn = f.db();
    conn.busy_timeout(Duration::from_secs(60)).unwrap();
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("BEGIN IMMEDIATE");
    std::fs::write(f.file("GO"), "").unwrap();
    let mut stuck = None;
    f.wait_until(DEADLINE, "/healthz to answer 503", || {
        let a = get(&addr, "/healthz");
        assert!(a.status == 200 || a.status == 503, "{}", a.status);
        if a.status == 503 {
            stuck = Some(a.text());
        }
        stuck.is_some()
    });
    let stuck = stuck.unwrap();
    assert!(
        stuck.starts_with("stuck: the daemon's loop completed no EVAL for"),
        "{stuck}"
    );
    // The listener answers everything else meanwhile.
    assert_eq!(get(&addr, "/api/runs").status, 200);
    tx.rollback().unwrap();
    f.wait_until(DEADLINE, "/healthz to answer 200 again", || {
        get(&addr, "/healthz").status == 200
    });
    f.wait_status(id, "succeeded");
    drop(d);
}
