//! `max_parallel`: several runs of one project at once, never more than the limit, by the
//! commands' own records, whatever happens to the daemon.

use crate::common::*;

/// Ten queued runs of a project with `max_parallel = 3` under a global cap of 10: three run at
/// once (never four, by the records the commands write themselves), also across a SIGKILL of
/// the daemon while three are running, and each run starts exactly once.
#[test]
fn max_parallel_three_never_exceeds_three_across_a_sigkill() {
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 10\n\
             [projects.p]\ncommand = {}\nmax_parallel = 3\n",
            sh(&recorder_script(&dir.join("rec"), "1")),
        )
    });
    let rec = f.file("rec");
    let mut d1 = f.start_daemon();
    let ids: Vec<i64> = (0..10).map(|_| f.enqueue("p")).collect();
    let starts = |rec: &std::path::Path| {
        if !rec.exists() {
            return 0;
        }
        read_records(rec).iter().filter(|r| r.start).count()
    };
    f.wait_until(DEADLINE, "three runs started", || starts(&rec) >= 3);
    d1.kill();
    let _d2 = f.start_daemon();
    for &id in &ids {
        let r = f.wait_terminal(id);
        assert_eq!(status_of(&r), "succeeded", "{r}\n{}", f.diagnostics());
    }
    let records = read_records(&rec);
    let overlap = max_overlap(&records);
    let most = overlap.per_project.get("p").copied().unwrap_or(0);
    assert!(most <= 3, "more than three runs of p at once: {overlap:?}");
    assert_eq!(most, 3, "p never ran three at once: {overlap:?}");
    assert_eq!(
        records.iter().filter(|r| r.start).count(),
        10,
        "{records:?}"
    );
    assert_check_ok(&f);
}
