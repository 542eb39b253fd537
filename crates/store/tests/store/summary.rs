//! The monitoring totals: runs ended per project and status (kept by the database as runs end,
//! or as rows are written already ended, and never lowered), and the queue per namespace, on
//! both backends.

use store::*;

use crate::common;
use crate::common::{open, Db};

fn new_run(project: &str, ns: &str, at: Millis) -> (NewRun, Millis) {
    (
        NewRun {
            project: project.into(),
            namespace: ns.into(),
            priority: 0,
            trigger: Trigger::Manual,
            occurrence: None,
            not_before: 0,
            ..Default::default()
        },
        at,
    )
}

fn finish(run_id: RunId, token: u64, status: RunStatus, at: Millis) -> Transition {
    Transition {
        run_id,
        token,
        change: Change::Finish {
            status,
            exit_code: None,
            signal: None,
            reason: None,
            retry: None,
            finished_at: Some(at),
        },
    }
}

fn totals_count_every_end_once_and_queue_is_summed_per_namespace(db: &Db) {
    let (s, epoch) = open(db);
    let enqueue = |p: &str, ns: &str, at: Millis| {
        let (n, at) = new_run(p, ns, at);
        s.enqueue(&n, at).unwrap()
    };
    let a1 = enqueue("a", "ops", 10);
    let a2 = enqueue("a", "ops", 20);
    let b1 = enqueue("b", "web", 30);
    let _b2 = enqueue("b", "web", 40);
    let _c1 = enqueue("c", "ops", 50);
    assert!(s.ended_totals().unwrap().is_empty());
    let q = s.queue_summary(1_000).unwrap();
    assert_eq!(
        q,
        vec![
            QueueSummary {
                namespace: "ops".into(),
                queued: 3,
                oldest_enqueued_at: 10,
                oldest_ready_at: Some(10),
            },
            QueueSummary {
                namespace: "web".into(),
                queued: 2,
                oldest_enqueued_at: 30,
                oldest_ready_at: Some(30),
            },
        ]
    );

    // a1 succeeds, a2 fails, b1 is cancelled while queued.
    let req = |id| ClaimRequest {
        run_id: id,
        namespace: "ops".into(),
        global_cap: 4,
        namespace_cap: None,
        max_parallel: 1,
        host_cap: None,
        config_version: None,
    };
    let c = s.claim(epoch, &[req(a1)], 100).unwrap();
    s.apply(
        epoch,
        &[finish(a1, c[0].run.claim_token, RunStatus::Succeeded, 150)],
        160,
    )
    .unwrap();
    let c = s.claim(epoch, &[req(a2)], 200).unwrap();
    s.apply(
        epoch,
        &[finish(a2, c[0].run.claim_token, RunStatus::Failed, 250)],
        260,
    )
    .unwrap();
    s.cancel_queued_runs(&[b1], "test", 300).unwrap();
    // Applying the same end again changes nothing (the transition no longer fits).
    s.apply(
        epoch,
        &[finish(a2, c[0].run.claim_token, RunStatus::Failed, 270)],
        280,
    )
    .unwrap();

    // An occurrence too late to start is inserted already ended (cancelled): counted too.
    let mut late = common::req(None, None, OverlapPolicy::Forbid);
    late.too_late = Some(90);
    assert!(s.fire_schedule(epoch, &late, 400).unwrap().written);

    // A row written already ended by another program (an import, a restored archive) counts.
    let sql = "INSERT INTO runs (project, namespace, status, trigger, enqueued_at, finished_at) \
               VALUES ('x', 'default', 'succeeded', 'manual', 1, 7)";
    db.exec(sql, sql);

    let totals: Vec<_> = s
        .ended_totals()
        .unwrap()
        .into_iter()
        .map(|t| (t.project, t.status, t.count, t.last_finished_at))
        .collect();
    assert_eq!(
        totals,
        vec![
            ("a".into(), RunStatus::Failed, 1, Some(250)),
            ("a".into(), RunStatus::Succeeded, 1, Some(150)),
            ("b".into(), RunStatus::Cancelled, 1, Some(300)),
            ("p".into(), RunStatus::Cancelled, 1, Some(400)),
            ("x".into(), RunStatus::Succeeded, 1, Some(7)),
        ]
    );
    let q = s.queue_summary(1_000).unwrap();
    assert_eq!(q.len(), 2);
    assert_eq!((q[0].queued, q[0].oldest_enqueued_at), (1, 50));
    assert_eq!((q[1].queued, q[1].oldest_enqueued_at), (1, 40));
}

both_backends!(totals_count_every_end_once_and_queue_is_summed_per_namespace);
