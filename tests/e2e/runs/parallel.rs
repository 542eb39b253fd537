//! `max_parallel`: several runs of one project at once, never more than the limit, by the
//! commands' own records, whatever happens to the daemon.

use crate::common::restart::eval_barrier;
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

/// A host's own cap (`[hosts.<name>]`) holds runs back like any other, and `fleet status`
/// shows the runs on this host against it, in text and JSON.
#[test]
fn status_shows_this_hosts_own_cap() {
    let f = Fleet::with(|dir| {
        let release = dir.join("release");
        format!(
            "host = \"h1\"\nmax_concurrency = 10\n\
             [hosts.h1]\nmax_concurrency = 2\n\
             [projects.hold]\nmax_parallel = 5\ncommand = {}\n",
            sh(&format!(
                "while [ ! -e {} ]; do sleep 0.05; done",
                shell_quote(&release)
            ))
        )
    });
    let mut d = f.start_daemon();
    let ids: Vec<i64> = (0..3).map(|_| f.enqueue("hold")).collect();
    f.wait_until(DEADLINE, "two runs active on h1", || {
        f.status()["host_capacity"]["active"] == 2
    });
    eval_barrier(&f, 2);
    let status = f.status();
    assert_eq!(
        status["host_capacity"],
        serde_json::json!({"name": "h1", "active": 2, "max_concurrency": 2}),
        "{status}"
    );
    assert_eq!(
        status["global"]["active"], 2,
        "the host cap let a third run start: {status}"
    );
    let text = f.cmd_ok(&["status"]);
    assert!(
        text.contains("host h1: 2 of 2 (this host's own cap)"),
        "{text}"
    );

    // With no daemon, the file's cap for this host, and the runs still on it.
    d.kill();
    let status = f.status();
    assert_eq!(status["daemon"]["running"], false, "{status}");
    assert_eq!(
        status["host_capacity"],
        serde_json::json!({"name": "h1", "active": 2, "max_concurrency": 2}),
        "{status}"
    );

    std::fs::write(f.path().join("release"), "").unwrap();
    let _d = f.start_daemon();
    for &id in &ids {
        assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    }
    assert_check_ok(&f);
}
