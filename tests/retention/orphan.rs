//! A run folder with no database row (a fleet.db restored from an older backup): `fleet check`
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
    let orphan = f.state_dir().join("runs").join("99999");
    std::fs::create_dir(&orphan).unwrap();
    let out = f.cmd(&["check", "--json"]);
    assert_eq!(out.code(), Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("folder_without_run"), "{}", out.stdout);
    assert!(out.stdout.contains("by hand"), "{}", out.stdout);
    f.cmd_ok(&["prune"]);
    assert!(
        orphan.is_dir(),
        "prune never removes a folder it has no row for"
    );
}
