//! The dashboard in a real browser (headless Chromium): it shows a namespace's occupancy and a
//! queued run; a run enqueued from the command line appears and finishes on the open page
//! without a reload; a run's page follows its log while it runs. Screenshots go to
//! `target/http-screenshots/`.
//!
//! Without Chromium the test says so on stderr and passes, except under `CI=true`, where it
//! fails: CI installs it (`.ci/run`).

use std::path::PathBuf;

use super::gated;
use crate::common::cdp::{find_chromium, Browser};
use crate::common::http_client::http_address;
use crate::common::*;

/// Where the screenshots go: `target/http-screenshots/` beside the test executable's profile
/// folder.
fn screenshots() -> PathBuf {
    let bin = shared_path();
    bin.parent()
        .and_then(|p| p.parent())
        .unwrap_or(bin.as_path())
        .join("http-screenshots")
}

/// A run's row in one of the index's tables.
fn row(table: &str, id: i64) -> String {
    format!("document.querySelector('#{table} tr[data-run-id=\"{id}\"]')")
}

#[test]
fn the_dashboard_follows_runs_live_in_chromium() {
    let Some(chromium) = find_chromium() else {
        let msg = "CHROMIUM IS MISSING: the dashboard's browser test did not run. Install it \
                   (`apt-get install chromium`) or point FLEET_CHROMIUM at it.";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{msg}");
        }
        eprintln!("\n*** {msg} ***\n");
        return;
    };
    let f = Fleet::with(|dir| {
        format!(
            "http_listen = \"127.0.0.1:0\"\ntick = \"200ms\"\n\
             [namespaces.ops]\nmax_concurrency = 1\n\
             [projects.deploy]\ncommand = {gated}\nnamespace = \"ops\"\n\
             [projects.backup]\ncommand = {quick}\nnamespace = \"ops\"\n\
             [projects.report]\ncommand = {talk}\n",
            gated = gated(dir, 0),
            quick = sh("echo backed up"),
            talk = sh(&format!(
                "echo report line one; while [ ! -e {go} ]; do sleep 0.05; done; echo report finished",
                go = shell_quote(&dir.join("GO2"))
            )),
        )
    });
    let d = f.start_daemon();
    let addr = http_address(&d);
    let deploy = f.enqueue("deploy");
    f.wait_status(deploy, "running");
    let backup = f.enqueue("backup");

    let shots = screenshots();
    let mut b = Browser::start(&chromium, &f.marker, 1100, 900);
    b.open(&format!("http://{addr}/"));
    // A mark that a reload would erase: everything below happens on this very page.
    b.eval("window.fleetTestMark = 1");
    b.wait(
        "ops at 1 / 1",
        "document.querySelector('#namespaces tr[data-namespace=\"ops\"] .occupancy').textContent === '1 / 1'",
    );
    b.wait("the queued backup run", &row("queued", backup));
    b.wait("the active deploy run", &row("active", deploy));
    b.screenshot(&shots.join("1-occupancy-and-queue.png"));

    // A run enqueued from the command line appears, runs and ends on the open page.
    let report = f.enqueue("report");
    b.wait(
        "the report run to appear running",
        &format!("{} !== null", row("active", report)),
    );
    b.screenshot(&shots.join("2-enqueued-from-the-cli.png"));
    std::fs::write(f.file("GO2"), "").unwrap();
    b.wait(
        "the report run to finish",
        &format!("{}?.dataset.status === 'succeeded'", row("recent", report)),
    );
    assert_eq!(b.eval("window.fleetTestMark"), 1, "the page was reloaded");
    b.screenshot(&shots.join("3-finished-without-reload.png"));

    // The deploy run's log, followed while it runs, to its end.
    b.eval(&format!(
        "document.querySelector('#active a[href=\"/runs/{deploy}\"]').click()"
    ));
    b.wait(
        "the deploy run's page",
        &format!("location.pathname === '/runs/{deploy}' && document.readyState === 'complete'"),
    );
    b.eval("window.fleetTestMark = 2");
    b.wait(
        "its first line",
        &format!("document.getElementById('log').textContent.includes('run {deploy} says hello')"),
    );
    b.screenshot(&shots.join("4-log-following.png"));
    std::fs::write(f.file("GO"), "").unwrap();
    b.wait(
        "its last line and its end",
        &format!(
            "document.getElementById('log').textContent.includes('run {deploy} done') && \
             document.getElementById('run').dataset.status === 'succeeded'"
        ),
    );
    assert_eq!(
        b.eval("window.fleetTestMark"),
        2,
        "the log page was reloaded"
    );
    assert_eq!(
        b.eval("document.getElementById('log').textContent")
            .as_str()
            .unwrap(),
        f.logs(deploy),
        "the page shows the whole log, once"
    );
    b.screenshot(&shots.join("5-log-ended.png"));

    // Back on the index: the dashboard as the README shows it.
    b.open(&format!("http://{addr}/"));
    b.wait(
        "every run ended",
        &format!("{}?.dataset.status === 'succeeded'", row("recent", backup)),
    );
    b.screenshot(&shots.join("6-dashboard.png"));
    eprintln!("screenshots in {}", shots.display());
}
