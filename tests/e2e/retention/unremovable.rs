//! A run whose files cannot be removed (here: a folder where its log should be) is kept and
//! named by `fleet prune`, which exits 1 — and the other runs are pruned all the same: one
//! damaged file never stops all pruning.

use crate::common::*;

#[test]
fn one_run_that_cannot_be_removed_does_not_stop_the_prune() {
    let f = Fleet::new("[projects.p]\ncommand = [\"sh\", \"-c\", \"echo out\"]\n");
    let d = f.start_daemon();
    let ids: Vec<i64> = (0..4)
        .map(|_| {
            let id = f.enqueue("p");
            f.wait_terminal(id);
            id
        })
        .collect();
    drop(d);
    // Ended a minute ago, past the grace a prune gives the newly ended.
    f.db()
        .execute_batch(
            "UPDATE runs SET started_at = started_at - 60000, finished_at = finished_at - 60000",
        )
        .unwrap();
    // The oldest run's log is a non-empty folder: no unlink removes it.
    let log = log_path(&f, ids[0]);
    std::fs::remove_file(&log).unwrap();
    std::fs::create_dir(&log).unwrap();
    std::fs::write(log.join("x"), "x").unwrap();
    let text = std::fs::read_to_string(f.file("fleet.toml")).unwrap();
    f.replace_config(&format!("keep_runs = 1\n{text}"));

    let out = f.cmd(&["prune"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("run {}: cannot remove its files", ids[0])),
        "{}",
        out.stderr
    );
    for id in &ids[1..3] {
        assert!(
            out.stdout.contains(&format!("pruned run {id} ")),
            "run {id}: {}",
            out.stdout
        );
    }
    let left: Vec<i64> = f.runs().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(
        left,
        vec![ids[3], ids[0]],
        "the newest kept, the damaged one left"
    );
    assert!(run_ids_on_disk(&f).contains(&ids[0]));
}
