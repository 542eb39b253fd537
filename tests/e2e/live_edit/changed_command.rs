//! A project whose command changed: the active run keeps the old command, runs started after the
//! edit use the new one.

use super::gates::*;
use super::reload::*;
use crate::common::*;

fn config(p: &Paths, label: &str, global: usize) -> String {
    format!(
        "max_concurrency = {global}\n[projects.p]\ncommand = {}\n",
        gated(p, label)
    )
}

/// The active run keeps the old command (its process is not replaced: same pid, one start, its
/// output all "old"); runs started after the edit — one queued before it, one after — use the
/// new command.
#[test]
fn a_changed_command_applies_to_new_runs_only() {
    let f = Fleet::with(|dir| config(&Paths::of(dir), "old", 4));
    let p = Paths::of(f.path());
    let mut d = start(&f);
    let r1 = f.enqueue("p");
    wait_started(&f, &p, r1);
    let pid = f.wait_run(r1, "a pid", |r| r["pid"].is_i64())["pid"].clone();
    let r2 = f.enqueue("p"); // queued behind r1 (one active run per project)

    edit(&f, &config(&p, "new", 5));
    wait_applied(&f, 5, "the new command to be in force");
    let r3 = f.enqueue("p");
    eval_barrier(&f);
    let r = f.run(r1);
    assert_eq!(status_of(&r), "running", "{r}");
    assert_eq!(r["pid"], pid, "the active run was restarted: {r}");

    release_all(&p);
    assert_all_succeed(&f, &[r1, r2, r3]);
    let log1 = f.logs(r1);
    assert_eq!(
        log1,
        format!("old run {r1}\nold done {r1}\n"),
        "the active run kept the old command"
    );
    for id in [r2, r3] {
        let log = f.logs(id);
        assert_eq!(
            log,
            format!("new run {id}\nnew done {id}\n"),
            "run {id} uses the new command"
        );
    }
    let recs = records(&p);
    try_max_overlap(&recs).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(starts(&recs).len(), 3, "{recs:#?}");
    d.assert_alive();
    assert_check_ok(&f);
}
