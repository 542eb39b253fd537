//! A run's files with no database row (a fleet.db restored from an older backup): `fleet check`
//! reports it, naming what to do, and `fleet prune` leaves it to the operator.

use crate::common::*;

#[test]
fn a_folder_without_a_row_is_a_violation_prune_leaves_alone() {
    let f = Fleet::new("keep_runs = 1\n[projects.p]\ncommand = [\"true\"]\n");
    let mut d = f.start_daemon();
    let id = f.enqueue("p");
    f.wait_terminal(id);
    d.kill();
    assert_check_ok(&f);
    // The log of one run, and the overflow file of another.
    let orphan = f.state_dir().join("runs").join("99999.log");
    std::fs::write(&orphan, "output\n").unwrap();
    let flat = f.state_dir().join("runs").join("99998.more");
    std::fs::write(&flat, "").unwrap();
    let out = f.cmd(&["check", "--json"]);
    assert_eq!(out.code(), Some(1), "{}{}", out.stdout, out.stderr);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let orphans: Vec<i64> = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["kind"] == "folder_without_run")
        .map(|v| v["run_id"].as_i64().unwrap())
        .collect();
    assert_eq!(orphans, vec![99998, 99999], "{}", out.stdout);
    assert!(out.stdout.contains("by hand"), "{}", out.stdout);
    f.cmd_ok(&["prune"]);
    assert!(
        orphan.is_file() && flat.is_file(),
        "prune never removes files it has no row for"
    );
}
