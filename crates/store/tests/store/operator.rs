//! The operator's operations over several runs: the next attempt of a run (what `fleet wait`
//! follows) and the bulk cancel by project, namespace or all, with or without active runs.

use store::*;

use crate::common::{open, Db};

fn enqueue(s: &Store, project: &str, ns: &str) -> RunId {
    s.enqueue(
        &NewRun {
            project: project.into(),
            namespace: ns.into(),
            args: vec!["a".into()],
            env: vec![("K".into(), "v".into())],
            ..Default::default()
        },
        1,
    )
    .unwrap()
}

/// Claims `id` and ends it `failed`, with a retry when `retry`; returns the retry's id.
fn fail(s: &Store, epoch: i64, id: RunId, retry: bool) -> Option<RunId> {
    let c = s
        .claim(
            epoch,
            &[ClaimRequest {
                run_id: id,
                namespace: "default".into(),
                global_cap: 4,
                namespace_cap: None,
                max_parallel: 1,
                host_cap: None,
                config_version: None,
            }],
            2,
        )
        .unwrap();
    let done = s
        .apply(
            epoch,
            &[Transition {
                run_id: id,
                token: c[0].run.claim_token,
                change: Change::Finish {
                    status: RunStatus::Failed,
                    exit_code: Some(3),
                    signal: None,
                    reason: None,
                    retry: retry.then_some(0),
                    finished_at: None,
                },
            }],
            3,
        )
        .unwrap();
    match &done[0] {
        Applied::Done { retry, .. } => *retry,
        other => panic!("{other:?}"),
    }
}

fn next_attempt_follows_the_retry_chain_only(db: &Db) {
    let (s, epoch) = open(db);
    let first = enqueue(&s, "p", "default");
    // Runs of the same project queued meanwhile are not attempts of it.
    let other = enqueue(&s, "p", "default");
    assert_eq!(s.next_attempt(&s.get_run(first).unwrap()).unwrap(), None);
    let retry = fail(&s, epoch, first, true).unwrap();
    let next = s.next_attempt(&s.get_run(first).unwrap()).unwrap().unwrap();
    assert_eq!((next.id, next.attempt), (retry, 2));
    assert_eq!(next.args, ["a"], "a retry keeps the run's arguments");
    assert_eq!(s.next_attempt(&next).unwrap(), None);
    assert_eq!(s.next_attempt(&s.get_run(other).unwrap()).unwrap(), None);
}

fn cancel_selected_takes_its_selection_and_leaves_active_runs_with_queued_only(db: &Db) {
    let (s, epoch) = open(db);
    let a1 = enqueue(&s, "a", "ops");
    let a2 = enqueue(&s, "a", "ops");
    let b1 = enqueue(&s, "b", "default");
    let c = s
        .claim(
            epoch,
            &[ClaimRequest {
                run_id: a1,
                namespace: "ops".into(),
                global_cap: 4,
                namespace_cap: None,
                max_parallel: 1,
                host_cap: None,
                config_version: None,
            }],
            2,
        )
        .unwrap();
    assert_eq!(c.len(), 1);

    let done = s
        .cancel_selected(&CancelSelection::Namespace("ops".into()), true, "r", 5)
        .unwrap();
    assert_eq!(done.iter().map(|c| c.run_id).collect::<Vec<_>>(), [a2]);
    assert_eq!(s.get_run(a1).unwrap().status, RunStatus::Starting);
    assert!(!s.get_run(a1).unwrap().cancel_requested);
    assert_eq!(s.get_run(b1).unwrap().status, RunStatus::Queued);

    let done = s
        .cancel_selected(&CancelSelection::Project("a".into()), false, "r", 6)
        .unwrap();
    assert_eq!(
        done,
        [BulkCancelled {
            run_id: a1,
            project: "a".into(),
            outcome: CancelOutcome::Requested
        }]
    );
    let a1 = s.get_run(a1).unwrap();
    assert!(
        a1.cancel_requested && a1.status == RunStatus::Starting,
        "{a1:?}"
    );

    let done = s
        .cancel_selected(&CancelSelection::All, false, "r", 7)
        .unwrap();
    // The active run is asked again (harmless: the first request's words and instant stay).
    assert_eq!(
        done.iter()
            .map(|c| (c.run_id, c.outcome.clone()))
            .collect::<Vec<_>>(),
        [
            (a1.id, CancelOutcome::Requested),
            (b1, CancelOutcome::Cancelled)
        ]
    );
    assert_eq!(s.get_run(b1).unwrap().status, RunStatus::Cancelled);
    assert!(s
        .cancel_selected(&CancelSelection::All, true, "r", 8)
        .unwrap()
        .is_empty());
}

/// A retry of a rerun keeps what it runs (arguments, env) and the hook it answers, and links
/// to the failed attempt through `retry_of` alone: `rerun_of` is for the run trigger `rerun`
/// made.
fn a_retry_of_a_rerun_keeps_args_env_and_hook_but_not_rerun_of(db: &Db) {
    let (s, epoch) = open(db);
    let original = enqueue(&s, "p", "default");
    let rerun = s
        .enqueue(
            &NewRun {
                project: "p".into(),
                namespace: "default".into(),
                trigger: Trigger::Rerun,
                args: vec!["a".into()],
                env: vec![("K".into(), "v".into())],
                rerun_of: Some(original),
                hook_of: Some(original),
                ..Default::default()
            },
            1,
        )
        .unwrap();
    let retry = fail(&s, epoch, rerun, true).unwrap();
    let r = s.get_run(retry).unwrap();
    assert_eq!(r.trigger, Trigger::Retry);
    assert_eq!(r.retry_of, Some(rerun));
    assert_eq!(r.rerun_of, None, "a retry is not a rerun");
    assert_eq!(r.hook_of, Some(original));
    assert_eq!(r.args, ["a"]);
    assert_eq!(r.env, [("K".to_string(), "v".to_string())]);
}

both_backends!(
    a_retry_of_a_rerun_keeps_args_env_and_hook_but_not_rerun_of,
    next_attempt_follows_the_retry_chain_only,
    cancel_selected_takes_its_selection_and_leaves_active_runs_with_queued_only,
);
