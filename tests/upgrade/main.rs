//! The upgrade path: runs whose shims are of an earlier version — a lock file per run,
//! `runs/<id>.lock`, with the records appended to it (the version just before this one), or a
//! folder per run, `runs/<id>/`, with the records appended to its `lock` (the one before) or each
//! in a file of its own (the one before that) — still in flight when a daemon of this version
//! takes over, are adopted and settled with their real exit status; `fleet check`, `fleet logs`
//! and prune read every layout, and the new daemon's own runs use this version's slots beside
//! them.
//!
//! The earlier versions' shims are the test-only earlier-layout writer
//! (`supervisor::shim::legacy`, selected by `FLEET_TEST_LEGACY_RUN_LAYOUT` in the daemon's
//! environment, compiled in with the `failpoints` feature): frozen copies of the earlier
//! writers, instead of builds of earlier commits, each a cold build of the whole workspace.
//! Run with `cargo nextest run --all-features --test upgrade`.

#[path = "../common/mod.rs"]
mod common;

use std::path::Path;

use common::*;

/// Selects an earlier version's run layout in a test build's shims: `flat`, `folder` or `files`.
const LEGACY: &str = "FLEET_TEST_LEGACY_RUN_LAYOUT";

/// A command that prints a line, waits for `gate` to exist (polling: it is the command that
/// waits, not the test), prints another line and exits with `code`.
fn gated(name: &str, gate: &Path, code: i32) -> String {
    sh(&format!(
        "echo {name} began; while [ ! -e {gate} ]; do sleep 0.05; done; echo {name} ends; exit {code}",
        gate = shell_quote(gate)
    ))
}

fn config(dir: &Path) -> String {
    format!(
        "max_concurrency = 4\n\
         [projects.seven]\ncommand = {seven}\n\
         [projects.zero]\ncommand = {zero}\n\
         [projects.down]\ncommand = {down}\n\
         [projects.quick]\ncommand = {quick}\n",
        seven = gated("seven", &dir.join("GO"), 7),
        zero = gated("zero", &dir.join("GO"), 0),
        down = gated("down", &dir.join("GO-DOWN"), 5),
        quick = sh("echo quick; exit 3"),
    )
}

fn run_file(f: &Fleet, id: i64, name: &str) -> std::path::PathBuf {
    f.state_dir().join("runs").join(id.to_string()).join(name)
}

/// Runs `fleet check --json`, asserting it found nothing wrong.
fn assert_check_ok(f: &Fleet, when: &str) {
    let out = f.cmd(&["check", "--json"]);
    assert_eq!(out.code(), Some(0), "fleet check {when}: {out:?}");
}

/// The version just before this one: a lock file per run, the records appended to it.
#[test]
fn runs_of_the_lock_file_per_run_layout_are_adopted_and_settled_with_their_real_status() {
    upgrade_from("flat");
}

/// The version before that: a folder per run, the records appended to its `lock`.
#[test]
fn runs_of_the_folder_layout_are_adopted_and_settled_with_their_real_status() {
    upgrade_from("folder");
}

/// The version before those two: a folder per run, a file per record.
#[test]
fn runs_of_the_file_per_record_layout_are_adopted_and_settled_with_their_real_status() {
    upgrade_from("files");
}

fn upgrade_from(layout: &str) {
    let f = Fleet::with(config);
    let mut old = f.start_daemon_env(&[(LEGACY, layout)]);
    let seven = f.enqueue("seven");
    let zero = f.enqueue("zero");
    let down = f.enqueue("down");
    let quick_old = f.enqueue("quick");
    for id in [seven, zero, down] {
        f.wait_run(id, "running with a pid", |r| {
            r["status"] == "running" && r["pid"].is_i64()
        });
    }
    let r = f.wait_terminal(quick_old);
    assert_eq!(
        (status_of(&r), r["exit_code"].as_i64()),
        ("failed", Some(3))
    );
    // The old daemon's shims wrote the earlier layout, and nothing of this version's. (A binary
    // built without the `failpoints` feature ignores the variable and fails here: this test
    // then proves nothing.)
    for id in [seven, zero, down, quick_old] {
        let own = match layout {
            "flat" => flat_lock_path(&f, id),
            _ => run_file(&f, id, "lock"),
        };
        let lock = std::fs::read(&own).unwrap_or_else(|e| {
            panic!(
                "run {id}: no {} ({e}): build with --all-features",
                own.display()
            )
        });
        match layout {
            "flat" | "folder" => {
                assert!(
                    String::from_utf8_lossy(&lock).contains(r#""record":"started""#),
                    "run {id}: records appended to {}",
                    own.display()
                );
                assert!(!run_file(&f, id, "started").exists());
                assert_eq!(layout == "flat", !run_file(&f, id, "").exists(), "run {id}");
            }
            _ => {
                assert!(run_file(&f, id, "started").is_file(), "run {id}");
                assert!(lock.is_empty(), "run {id}: records appended to the lock");
            }
        }
    }
    for id in [seven, zero, down, quick_old] {
        assert!(!slot_used(&f, id), "run {id}: this version's slot");
    }
    assert!(has_record(&f, quick_old, "exit"));

    // The upgrade: the old daemon goes (SIGKILL, as abrupt as it gets); one run ends while no
    // daemon runs, the others stay in flight.
    old.kill();
    std::fs::write(f.file("GO-DOWN"), "").unwrap();
    f.wait_until(DEADLINE, "the old shim's exit record", || {
        has_record(&f, down, "exit")
    });
    f.wait_until(DEADLINE, "the ended run's shim to exit", || {
        let shims: Vec<i64> = marked_pids(&f.marker)
            .into_iter()
            .filter_map(shim_run_id)
            .collect();
        !shims.contains(&down)
    });

    let _new = f.start_daemon();
    let r = f.wait_terminal(down);
    assert_eq!(
        (status_of(&r), r["exit_code"].as_i64()),
        ("failed", Some(5)),
        "ended while no daemon ran: its real status from the old exit file: {r}"
    );
    for id in [seven, zero] {
        let r = f.run(id);
        assert_eq!(status_of(&r), "running", "adopted, still running: {r}");
    }
    assert_check_ok(&f, "with old shims adopted");

    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(seven);
    assert_eq!(
        (
            status_of(&r),
            r["exit_code"].as_i64(),
            r["attempt"].as_i64()
        ),
        ("failed", Some(7), Some(1)),
        "`exit 7` after the upgrade reads as failed with 7: {r}"
    );
    let r = f.wait_terminal(zero);
    assert_eq!(
        (status_of(&r), r["exit_code"].as_i64()),
        ("succeeded", Some(0)),
        "{r}"
    );
    assert_eq!(f.logs(seven), "seven began\nseven ends\n");
    assert_eq!(f.logs(quick_old), "quick\n");

    // The new daemon's own runs use the new layout, beside the old files: their slot only.
    let quick_new = f.enqueue("quick");
    let r = f.wait_terminal(quick_new);
    assert_eq!(
        (status_of(&r), r["exit_code"].as_i64()),
        ("failed", Some(3))
    );
    assert!(
        !run_file(&f, quick_new, "").exists(),
        "a folder for a new run"
    );
    assert!(
        !flat_lock_path(&f, quick_new).exists(),
        "a lock file for a new run"
    );
    assert!(slot_used(&f, quick_new));
    let records = run_records(&f, quick_new);
    assert_eq!(records.exit.map(|e| e.code), Some(Some(3)));
    assert_eq!(f.logs(quick_new), "quick\n");
    assert_check_ok(&f, "after the upgrade");

    // Prune reads both: with one run kept per project, the old layout's run of `quick` goes.
    let text = std::fs::read_to_string(f.file("fleet.toml")).unwrap();
    f.replace_config(&format!("keep_runs = 1\n{text}"));
    f.cmd_ok(&["prune"]);
    f.wait_until(DEADLINE, "the old layout's files pruned", || {
        !run_file(&f, quick_old, "").exists() && !flat_lock_path(&f, quick_old).exists()
    });
    assert!(slot_used(&f, quick_new), "newest kept");
    assert_check_ok(&f, "after the prune");
}
