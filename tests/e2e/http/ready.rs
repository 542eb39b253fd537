//! A delayed retry waiting out its backoff is queued but not ready: the ready-age gauge (what
//! the stale-queue alert reads) leaves it out, while the queued-age gauge counts it.

use std::time::Duration;

use super::metrics::{by_label, scrape};
use crate::common::http_client::http_address;
use crate::common::*;

#[test]
fn delayed_retry_is_not_counted_as_ready() {
    let f = Fleet::new(&format!(
        "http_listen = \"127.0.0.1:0\"\ntick = \"200ms\"\n\
         [projects.flaky]\ncommand = {bad}\nretries = 1\nretry_backoff = \"1h\"\n",
        bad = sh("exit 3")
    ));
    let d = f.start_daemon();
    let addr = http_address(&d);
    let first = f.enqueue("flaky");
    f.wait_terminal(first);
    // The retry sits queued for an hour; wait until the queued age has grown past a second.
    let mut last = String::new();
    f.wait_until(
        Duration::from_secs(20),
        "the delayed retry to age in the queue",
        || {
            let s = scrape(&addr);
            let queued = by_label(&s, "fleet_namespace_queued_runs", "namespace");
            let age = by_label(&s, "fleet_namespace_oldest_queued_age_seconds", "namespace");
            last = format!("{queued:?} {age:?}");
            queued.get("default") == Some(&1.0) && age.get("default").is_some_and(|a| *a > 1.0)
        },
    );
    let s = scrape(&addr);
    let ready = by_label(&s, "fleet_namespace_oldest_ready_age_seconds", "namespace");
    assert_eq!(
        ready.get("default"),
        Some(&0.0),
        "a retry waiting out its backoff counted as ready: {ready:?} ({last})"
    );
    let retry = f
        .runs()
        .into_iter()
        .find(|r| r["id"].as_i64() != Some(first))
        .expect("the retry");
    assert_eq!(status_of(&retry), "queued", "{retry}");
}
