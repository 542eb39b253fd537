//! Bulk `fleet cancel`: several ids, `--project`, `--namespace`, `--all`, and `--queued`, which
//! leaves active runs alone. Each prints one line per run it reached.

use crate::common::*;

const TWO_NAMESPACES: &str = "[namespaces.ops]\nmax_concurrency = 1\n\
     [projects.a]\ncommand = [\"true\"]\nnamespace = \"ops\"\n\
     [projects.b]\ncommand = [\"true\"]\n";

fn statuses(f: &Fleet, ids: &[i64]) -> Vec<String> {
    ids.iter()
        .map(|&id| status_of(&f.run(id)).to_string())
        .collect()
}

#[test]
fn cancel_by_project_namespace_and_ids() {
    let f = Fleet::new(TWO_NAMESPACES);
    let a: Vec<i64> = (0..3).map(|_| f.enqueue("a")).collect();
    let b: Vec<i64> = (0..3).map(|_| f.enqueue("b")).collect();

    let out = f.cmd_ok(&["cancel", "--project", "a"]);
    assert_eq!(out.lines().count(), 3, "{out}");
    for id in &a {
        assert!(out.contains(&format!("run {id} (a) cancelled")), "{out}");
    }
    assert_eq!(statuses(&f, &a), ["cancelled"; 3]);
    assert_eq!(statuses(&f, &b), ["queued"; 3]);

    // An id given twice is reported once, in the order of first appearance.
    let (b0, b2) = (b[0].to_string(), b[2].to_string());
    let out = f.cmd_ok(&["cancel", &b2, &b0, &b2]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("run {b2} (b) cancelled"),
            format!("run {b0} (b) cancelled")
        ],
        "{out}"
    );
    assert_eq!(statuses(&f, &b), ["cancelled", "queued", "cancelled"]);

    // `b` has no namespace: it counts in "default".
    let out = f.cmd_ok(&["cancel", "--namespace", "ops"]);
    assert_eq!(out.trim(), "nothing to cancel");
    let out = f.cmd_ok(&["cancel", "--namespace", "default"]);
    assert!(
        out.contains(&format!("run {} (b) cancelled", b[1])),
        "{out}"
    );
    assert_eq!(statuses(&f, &b), ["cancelled"; 3]);
}

#[test]
fn unknown_ids_and_names_are_exit_2_and_cancel_nothing() {
    let f = Fleet::new(TWO_NAMESPACES);
    let id = f.enqueue("a");
    let out = f.cmd(&["cancel", &id.to_string(), "999"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert_eq!(
        status_of(&f.run(id)),
        "queued",
        "nothing cancelled before the check"
    );
    for args in [
        &["cancel", "--project", "nope"][..],
        &["cancel", "--namespace", "nope"],
    ] {
        let out = f.cmd(args);
        assert_eq!(out.code(), Some(2), "{args:?} {out:?}");
    }
    // A selection needs exactly one of: ids, --project, --namespace, --all.
    for args in [&["cancel"][..], &["cancel", "--all", "--project", "a"]] {
        assert_eq!(f.cmd(args).code(), Some(2), "{args:?}");
    }
}

#[test]
fn all_queued_leaves_the_active_run_alone_and_all_stops_it() {
    let f = Fleet::new(&format!(
        "[projects.long]\ncommand = {}\n[projects.b]\ncommand = [\"true\"]\n",
        sh("sleep 300")
    ));
    let _d = f.start_daemon();
    let long = f.enqueue("long");
    f.wait_status(long, "running");
    let queued: Vec<i64> = (0..2).map(|_| f.enqueue("long")).collect();

    // Every form of --queued names the active run it leaves alone, as the id form does.
    let left = format!("run {long} (long): active, left alone");
    let out = f.cmd_ok(&["cancel", "--all", "--queued"]);
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.lines().any(|l| l == left), "{out}");
    assert_eq!(statuses(&f, &queued), ["cancelled"; 2]);
    let one = f.enqueue("long");
    let out = f.cmd_ok(&["cancel", "--project", "long", "--queued"]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.contains(&format!("run {one} (long) cancelled")),
        "{out}"
    );
    assert!(out.lines().any(|l| l == left), "{out}");
    let out = f.cmd_ok(&["cancel", "--namespace", "default", "--queued"]);
    assert_eq!(out.trim(), left, "nothing queued: the active run alone");

    let run = f.run(long);
    assert_eq!(status_of(&run), "running", "{run}");
    assert_eq!(run["cancel_requested"], false, "{run}");

    let out = f.cmd_ok(&["cancel", "--all"]);
    assert!(
        out.contains(&format!("run {long} (long): cancel requested")),
        "{out}"
    );
    f.wait_status(long, "cancelled");
}
