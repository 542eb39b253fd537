//! A project removed from fleet.toml loses its per-project series at the next reload, so an
//! alert on its last success cannot fire forever; the projects still configured keep theirs.

use std::time::Duration;

use super::metrics::{by_label, scrape};
use crate::common::http_client::http_address;
use crate::common::*;

const PER_PROJECT: [&str; 3] = [
    "fleet_runs_ended_total",
    "fleet_project_last_success_timestamp_seconds",
    "fleet_project_last_failure_timestamp_seconds",
];

fn config(with_old: bool) -> String {
    let mut t = format!(
        "http_listen = \"127.0.0.1:0\"\ntick = \"200ms\"\n\
         [projects.kept]\ncommand = {ok}\n",
        ok = sh("true")
    );
    if with_old {
        t.push_str(&format!(
            "[projects.old]\ncommand = {ok}\n\
             [projects.oldbad]\ncommand = {bad}\n",
            ok = sh("true"),
            bad = sh("exit 3")
        ));
    }
    t
}

#[test]
fn removed_project_series_are_dropped_at_reload() {
    let f = Fleet::new(&config(true));
    let d = f.start_daemon();
    let addr = http_address(&d);
    for p in ["kept", "old", "oldbad"] {
        let id = f.enqueue(p);
        f.wait_terminal(id);
    }
    let s = scrape(&addr);
    let ok = by_label(
        &s,
        "fleet_project_last_success_timestamp_seconds",
        "project",
    );
    assert!(ok.contains_key("old") && ok.contains_key("kept"), "{ok:?}");
    let bad = by_label(
        &s,
        "fleet_project_last_failure_timestamp_seconds",
        "project",
    );
    assert!(bad.contains_key("oldbad"), "{bad:?}");

    f.write_config(&config(false));
    f.cmd_ok(&["reload"]);
    f.wait_until(
        Duration::from_secs(20),
        "the removed projects' series to leave /metrics",
        || {
            let s = scrape(&addr);
            PER_PROJECT.iter().all(|m| {
                let l = by_label(&s, m, "project");
                !l.contains_key("old") && !l.contains_key("oldbad")
            })
        },
    );
    let s = scrape(&addr);
    let ok = by_label(
        &s,
        "fleet_project_last_success_timestamp_seconds",
        "project",
    );
    assert!(
        ok.contains_key("kept"),
        "the kept project lost its series: {ok:?}"
    );
    let ended = by_label(&s, "fleet_runs_ended_total", "project");
    assert!(ended.contains_key("kept"), "{ended:?}");
}
