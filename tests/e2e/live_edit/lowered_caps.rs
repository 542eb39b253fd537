//! Lowering a cap (global or a namespace's) below the current occupancy kills nothing: the
//! active runs run to their end, and the next run waits until occupancy is below the new cap.

use super::gates::*;
use super::reload::*;
use crate::common::*;

fn config(p: &Paths, global: usize, ns_cap: Option<usize>) -> String {
    let mut t = format!("max_concurrency = {global}\ntick = \"100ms\"\n");
    if let Some(c) = ns_cap {
        t += &format!("[namespaces.A]\nmax_concurrency = {c}\n");
    }
    for i in 1..=4 {
        t += &format!("[projects.p{i}]\ncommand = {}\n", gated(p, "x"));
        if ns_cap.is_some() {
            t += "namespace = \"A\"\n";
        }
    }
    t
}

/// Three runs active under a cap of 3; the cap goes to 1. The three run to their end
/// (succeeded), and the fourth starts only once none of them is active.
fn lowering_a_cap(global_before: usize, global_after: usize, ns: Option<(usize, usize)>) {
    let f = Fleet::with(|dir| config(&Paths::of(dir), global_before, ns.map(|n| n.0)));
    let p = Paths::of(f.path());
    let d = start(&f);
    let active: Vec<i64> = ["p1", "p2", "p3"].iter().map(|p| f.enqueue(p)).collect();
    for &id in &active {
        wait_started(&f, &p, id);
    }
    let fourth = f.enqueue("p4");
    eval_barrier(&f);
    assert_eq!(status_of(&f.run(fourth)), "queued", "the cap of 3 is full");

    edit(&f, &config(&p, global_after, ns.map(|n| n.1)));
    wait_status(&f, "the lowered cap to be in force", |s| {
        global_cap(s) == Some(global_after as i64)
            && ns.is_none_or(|(_, after)| declared(s).get("A") == Some(&(after as i64, 1)))
            && reload_error(s).is_none()
    });
    eval_barrier(&f);
    for &id in &active {
        let r = f.run(id);
        assert_eq!(
            status_of(&r),
            "running",
            "lowering a cap killed run {id}: {r}"
        );
    }
    // One by one they end; the fourth waits until occupancy is below the new cap of 1.
    for (k, &id) in active.iter().enumerate() {
        release(&p, id);
        let r = f.wait_terminal(id);
        assert_eq!(status_of(&r), "succeeded", "run {id}: {r}");
        if k < 2 {
            eval_barrier(&f);
            let r = f.run(fourth);
            assert_eq!(
                status_of(&r),
                "queued",
                "run {fourth} started with {} of the old runs still active, over the cap of 1: {r}\n{}",
                2 - k,
                f.diagnostics()
            );
        }
    }
    wait_started(&f, &p, fourth);
    release(&p, fourth);
    assert_all_succeed(&f, &active);
    assert_all_succeed(&f, &[fourth]);
    let recs = records(&p);
    let fourth_start = start_of(&recs, fourth).unwrap().at;
    for &id in &active {
        let end = end_of(&recs, id).unwrap_or_else(|| panic!("run {id} has no end record"));
        assert!(
            end.at <= fourth_start,
            "run {fourth} started before run {id} ended: {recs:#?}"
        );
    }
    drop(d);
    assert_check_ok(&f);
}

#[test]
fn lowering_the_global_cap_below_occupancy_kills_nothing() {
    lowering_a_cap(3, 1, None);
}

#[test]
fn lowering_a_namespace_cap_below_occupancy_kills_nothing() {
    lowering_a_cap(10, 10, Some((3, 1)));
}
