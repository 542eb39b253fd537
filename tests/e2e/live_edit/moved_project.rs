//! A project moved to another namespace: its active run keeps counting where it started, its
//! next runs count in the new namespace.

use super::gates::*;
use super::reload::*;
use crate::common::*;

fn config(p: &Paths, p_ns: &str, global: usize) -> String {
    format!(
        "max_concurrency = {global}\n\
         [namespaces.A]\nmax_concurrency = 1\n\
         [namespaces.B]\nmax_concurrency = 1\n\
         [projects.P]\nnamespace = \"{p_ns}\"\ncommand = {cmd}\n\
         [projects.Q]\nnamespace = \"B\"\ncommand = {cmd}\n\
         [projects.R]\nnamespace = \"A\"\ncommand = {cmd}\n",
        cmd = gated(p, "x")
    )
}

/// P runs in A (cap 1); P moves to B (cap 1). P's active run keeps counting in A: a queued run of
/// Q (in B) starts while it is active, a queued run of R (in A) does not; a new run of P counts
/// in B.
#[test]
fn a_moved_project_counts_where_its_active_run_started() {
    let f = Fleet::with(|dir| config(&Paths::of(dir), "A", 10));
    let p = Paths::of(f.path());
    let mut d = start(&f);
    let p1 = f.enqueue("P");
    let p1_start = wait_started(&f, &p, p1);
    assert_eq!(p1_start.namespace, "A");

    edit(&f, &config(&p, "B", 9));
    wait_applied(&f, 9, "the move of P to B");
    // R first: the EVAL that starts Q has R in its queue.
    let r = f.enqueue("R");
    let qq = f.enqueue("Q");
    let q_start = wait_started(&f, &p, qq);
    assert_eq!(q_start.namespace, "B");
    let p2 = f.enqueue("P"); // counts in B now
    eval_barrier(&f);
    assert_eq!(
        status_of(&f.run(r)),
        "queued",
        "A still holds P's run:\n{}",
        f.diagnostics()
    );
    assert_eq!(status_of(&f.run(p2)), "queued");
    let s = f.status();
    assert_eq!(
        s["namespaces"]["A"]["active"], 1,
        "P's run counts in A: {s}"
    );
    assert_eq!(
        s["namespaces"]["B"]["active"], 1,
        "Q's run counts in B: {s}"
    );
    assert_eq!(f.run(p1)["namespace"], "A", "P's active run stays in A");

    // P's run ends: A is free for R; P's next run waits for B (Q).
    release(&p, p1);
    let r_start = wait_started(&f, &p, r);
    assert_eq!(r_start.namespace, "A");
    eval_barrier(&f);
    assert_eq!(status_of(&f.run(p2)), "queued", "B still holds Q's run");
    release(&p, qq);
    let p2_start = wait_started(&f, &p, p2);
    assert_eq!(p2_start.namespace, "B", "P's new run counts in B");
    release_all(&p);
    assert_all_succeed(&f, &[p1, qq, r, p2]);

    let recs = records(&p);
    let at = |id, start: bool| {
        recs.iter()
            .find(|x| x.run_id == id && x.start == start)
            .unwrap_or_else(|| panic!("no record for run {id}: {recs:#?}"))
            .at
    };
    assert!(
        at(qq, true) < at(p1, false),
        "Q started while P's run was active (in A)"
    );
    assert!(at(r, true) >= at(p1, false), "R waited for P's run to end");
    assert!(at(p2, true) >= at(qq, false), "P's new run waited for B");
    assert_starts_within_caps(&recs, &[(0, 10, vec![("A", 1), ("B", 1)])]);
    assert_eq!(f.run(p2)["namespace"], "B");
    d.assert_alive();
    assert_check_ok(&f);
}
