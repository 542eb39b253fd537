//! Namespaces → none → namespaces, with runs in flight and a SIGKILL and restart in between:
//! every packer (the namespaced one, and the fallback one used without namespaces) counts the
//! runs already active, so no run starts twice and every start is within the caps in force.

use super::gates::*;
use super::reload::*;
use crate::common::*;

fn namespaced(p: &Paths) -> String {
    let mut t = "max_concurrency = 3\ntick = \"100ms\"\n\
                 [namespaces.A]\nmax_concurrency = 1\n\
                 [namespaces.B]\nmax_concurrency = 1\n"
        .to_string();
    for ns in ["a", "b"] {
        for i in 1..=3 {
            t += &format!(
                "[projects.{ns}{i}]\nnamespace = \"{}\"\ncommand = {}\n",
                ns.to_uppercase(),
                gated(p, "x")
            );
        }
    }
    t
}

fn flat(p: &Paths) -> String {
    let mut t = "max_concurrency = 2\ntick = \"100ms\"\n".to_string();
    for ns in ["a", "b"] {
        for i in 1..=3 {
            t += &format!("[projects.{ns}{i}]\ncommand = {}\n", gated(p, "x"));
        }
    }
    t
}

/// Namespaces A (cap 1), B (cap 1), global 3, with a1 and b1 in flight and four runs queued;
/// then no namespaces with global cap 2 (the fallback packer), a daemon SIGKILL and restart in
/// that mode, and back to the namespaces. Each run starts exactly once, and every start is within
/// the caps in force at its instant, counting the runs already in flight.
#[test]
fn namespaces_to_none_and_back_with_runs_in_flight() {
    let f = Fleet::with(|dir| namespaced(&Paths::of(dir)));
    let p = Paths::of(f.path());
    let mut d = start(&f);
    let t0 = 0u128;
    let a1 = f.enqueue("a1");
    let b1 = f.enqueue("b1");
    wait_started(&f, &p, a1);
    wait_started(&f, &p, b1);
    let queued: Vec<i64> = ["a2", "b2", "a3", "b3"]
        .iter()
        .map(|p| f.enqueue(p))
        .collect();
    eval_barrier(&f);
    for &id in &queued {
        assert_eq!(status_of(&f.run(id)), "queued", "A and B are full");
    }

    // To no namespaces, global cap 2: a1 and b1 still count, so nothing may start.
    let t1 = now_ns();
    edit(&f, &flat(&p));
    wait_status(&f, "the switch to no namespaces", |s| {
        global_cap(s) == Some(2) && declared(s).is_empty() && reload_error(s).is_none()
    });
    eval_barrier(&f);
    assert_eq!(
        starts(&records(&p)).len(),
        2,
        "nothing may start while a1 and b1 fill the new global cap of 2:\n{}",
        f.diagnostics()
    );

    // a1 ends: exactly one queued run takes its place, in the default namespace.
    release(&p, a1);
    let recs = wait_n_starts(&f, &p, 3);
    let x = starts(&recs)[2].clone();
    assert_eq!(x.namespace, "default", "claimed without namespaces: {x:?}");

    // Double spawn after restart must be impossible: SIGKILL the daemon and restart it with zero
    // namespaces while b1 and x are in flight. The new daemon must count them (adopted) before
    // packing, in the fallback packer too.
    d.kill();
    drop(d);
    let d = start(&f);
    eval_barrier(&f);
    assert_eq!(
        starts(&records(&p)).len(),
        3,
        "the restarted daemon started a run over the global cap of 2:\n{}",
        f.diagnostics()
    );
    // b1 ends (the new daemon reaps it as an adopted run): one more takes its place.
    release(&p, b1);
    let recs = wait_n_starts(&f, &p, 4);
    let y = starts(&recs)[3].clone();
    assert_eq!(y.namespace, "default", "{y:?}");
    eval_barrier(&f);
    assert_eq!(starts(&records(&p)).len(), 4, "{}", f.diagnostics());

    // Back to the namespaces (global 3): x and y keep counting (globally, in "default"), so
    // exactly one more run may start, in A or B.
    let t2 = now_ns();
    edit(&f, &namespaced(&p));
    wait_status(&f, "the switch back to namespaces", |s| {
        global_cap(s) == Some(3)
            && declared(s).get("A") == Some(&(1, 1))
            && declared(s).get("B") == Some(&(1, 1))
            && reload_error(s).is_none()
    });
    let recs = wait_n_starts(&f, &p, 5);
    let z = starts(&recs)[4].clone();
    assert!(z.namespace == "A" || z.namespace == "B", "{z:?}");
    eval_barrier(&f);
    assert_eq!(
        starts(&records(&p)).len(),
        5,
        "x, y and z fill the global cap of 3:\n{}",
        f.diagnostics()
    );

    release_all(&p);
    let mut all = vec![a1, b1];
    all.extend(&queued);
    assert_all_succeed(&f, &all);
    let recs = records(&p);
    assert_eq!(starts(&recs).len(), 6, "{recs:#?}");
    assert_starts_within_caps(
        &recs,
        &[
            (t0, 3, vec![("A", 1), ("B", 1)]),
            (t1, 2, vec![]),
            (t2, 3, vec![("A", 1), ("B", 1)]),
        ],
    );
    drop(d);
    assert_check_ok(&f);
}
