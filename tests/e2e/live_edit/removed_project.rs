//! A project removed from the file: its queued runs end `cancelled` ("project removed"), its
//! active run runs to its end, and all its records stay readable.

use super::gates::*;
use super::reload::*;
use crate::common::*;

fn config(p: &Paths, with_gone: bool, global: usize) -> String {
    let mut t = format!(
        "max_concurrency = {global}\n[projects.keep]\ncommand = {}\n",
        quick(p, "keep")
    );
    if with_gone {
        t += &format!("[projects.gone]\ncommand = {}\n", gated(p, "gone"));
    }
    t
}

/// Removing a project ends its queued runs `cancelled` ("project removed"); its active run
/// runs to its end, and all its records stay readable.
#[test]
fn a_removed_project_cancels_its_queued_runs_and_lets_the_active_one_finish() {
    let f = Fleet::with(|dir| config(&Paths::of(dir), true, 4));
    let p = Paths::of(f.path());
    let mut d = start(&f);
    let active = f.enqueue("gone");
    wait_started(&f, &p, active);
    // One active run per project: these two wait behind it.
    let q1 = f.enqueue("gone");
    let q2 = f.enqueue("gone");
    let pid_before = f.wait_run(active, "a pid", |r| r["pid"].is_i64())["pid"].clone();

    edit(&f, &config(&p, false, 5));
    wait_applied(&f, 5, "the removal to be applied");
    for id in [q1, q2] {
        let r = f.wait_terminal(id);
        assert_eq!(status_of(&r), "cancelled", "run {id}: {r}");
        assert_eq!(r["reason"], "project removed", "run {id}: {r}");
        assert!(r["started_at"].is_null(), "run {id} never started: {r}");
    }
    eval_barrier(&f);
    let r = f.run(active);
    assert_eq!(
        status_of(&r),
        "running",
        "the active run must not be touched: {r}"
    );
    assert_eq!(r["pid"], pid_before, "{r}");
    assert!(end_of(&records(&p), active).is_none());

    release(&p, active);
    assert_all_succeed(&f, &[active]);
    let recs = records(&p);
    assert!(
        end_of(&recs, active).is_some(),
        "it ran to its end: {recs:#?}"
    );
    assert_eq!(
        starts(&recs).len(),
        1,
        "the cancelled runs never started: {recs:#?}"
    );

    // Its records stay readable.
    let runs = f.runs_with(&["--project", "gone"]);
    let mut got: Vec<(i64, String)> = runs
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), status_of(r).to_string()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (active, "succeeded".to_string()),
            (q1, "cancelled".to_string()),
            (q2, "cancelled".to_string())
        ]
    );
    let log = f.logs(active);
    assert!(
        log.contains(&format!("gone run {active}")) && log.contains(&format!("gone done {active}")),
        "log of run {active}: {log:?}"
    );
    f.cmd_ok(&["logs", &q1.to_string()]);
    let table = f.cmd_ok(&["runs", "--project", "gone"]);
    assert!(table.contains("project removed"), "{table}");
    // The project is gone from the config: new runs of it are refused.
    assert_eq!(f.cmd(&["enqueue", "gone"]).code(), Some(2));
    d.assert_alive();
    assert_check_ok(&f);
}
