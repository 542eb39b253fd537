//! Failure hooks at the store: the hook's run is queued by the transaction that writes a failed
//! end with no retry, exactly once, and never for a hook's own failure, a success or a cancel.

use crate::common;
use crate::common::Db;
use store::*;

/// Hooks: project `p` reports to `alert` (namespace `ops`).
fn hooks() -> FailureHooks {
    FailureHooks::from([(
        "p".to_string(),
        FailureHook {
            project: "alert".into(),
            namespace: "ops".into(),
        },
    )])
}

/// Queues and claims one run (`hook_of` given), returning (id, claim token).
fn claimed(s: &Store, epoch: i64, project: &str, hook_of: Option<RunId>) -> (RunId, u64) {
    let id = s
        .enqueue(
            &NewRun {
                project: project.into(),
                namespace: "default".into(),
                hook_of,
                ..Default::default()
            },
            1,
        )
        .unwrap();
    let c = s
        .claim(
            epoch,
            &[ClaimRequest {
                run_id: id,
                namespace: "default".into(),
                global_cap: 8,
                namespace_cap: None,
                max_parallel: 1,
                host_cap: None,
                config_version: None,
            }],
            2,
        )
        .unwrap();
    (id, c[0].run.claim_token)
}

fn finish(id: RunId, token: u64, status: RunStatus, retry: Option<Millis>) -> Transition {
    Transition {
        run_id: id,
        token,
        change: Change::Finish {
            status,
            exit_code: (status == RunStatus::Failed).then_some(3),
            signal: None,
            reason: None,
            retry,
            finished_at: None,
        },
    }
}

fn hook_runs(s: &Store) -> Vec<Run> {
    s.list_runs(&RunFilter {
        project: Some("alert".into()),
        ..Default::default()
    })
    .unwrap()
}

fn a_failed_end_queues_one_hook_run_in_its_transaction(db: &Db) {
    let (s, epoch) = common::open(db);
    let (id, token) = claimed(&s, epoch, "p", None);
    let done = s
        .apply_with_hooks(
            epoch,
            &[finish(id, token, RunStatus::Failed, None)],
            &hooks(),
            10,
        )
        .unwrap();
    let Applied::Done {
        hook: Some(hook), ..
    } = done[0]
    else {
        panic!("no hook run: {done:?}")
    };
    let h = s.get_run(hook).unwrap();
    assert_eq!(
        (
            h.project.as_str(),
            h.namespace.as_str(),
            h.trigger,
            h.status
        ),
        ("alert", "ops", Trigger::OnFailure, RunStatus::Queued)
    );
    assert_eq!(h.hook_of, Some(id));
    // The same end written again (a recovery that reads the run files once more) is skipped,
    // and queues nothing.
    let again = s
        .apply_with_hooks(
            epoch,
            &[finish(id, token, RunStatus::Failed, None)],
            &hooks(),
            11,
        )
        .unwrap();
    assert!(matches!(again[0], Applied::Skipped(_)), "{again:?}");
    assert_eq!(hook_runs(&s).len(), 1);
}

fn every_failure_status_reports_and_nothing_else_does(db: &Db) {
    let (s, epoch) = common::open(db);
    for (status, reports) in [
        (RunStatus::Failed, true),
        (RunStatus::TimedOut, true),
        (RunStatus::Lost, true),
        (RunStatus::Succeeded, false),
        (RunStatus::Cancelled, false),
    ] {
        let before = hook_runs(&s).len();
        let (id, token) = claimed(&s, epoch, "p", None);
        s.apply_with_hooks(epoch, &[finish(id, token, status, None)], &hooks(), 10)
            .unwrap();
        assert_eq!(
            hook_runs(&s).len() - before,
            usize::from(reports),
            "{status}"
        );
    }
}

fn a_retry_left_or_no_hook_configured_queues_none(db: &Db) {
    let (s, epoch) = common::open(db);
    let (id, token) = claimed(&s, epoch, "p", None);
    let done = s
        .apply_with_hooks(
            epoch,
            &[finish(id, token, RunStatus::Failed, Some(5))],
            &hooks(),
            10,
        )
        .unwrap();
    assert!(
        matches!(
            done[0],
            Applied::Done {
                retry: Some(_),
                hook: None,
                ..
            }
        ),
        "{done:?}"
    );
    let (id, token) = claimed(&s, epoch, "q", None);
    s.apply_with_hooks(
        epoch,
        &[finish(id, token, RunStatus::Failed, None)],
        &hooks(),
        10,
    )
    .unwrap();
    let (id, token) = claimed(&s, epoch, "p", None);
    // `apply` is `apply_with_hooks` with no hooks.
    s.apply(epoch, &[finish(id, token, RunStatus::Failed, None)], 10)
        .unwrap();
    assert!(hook_runs(&s).is_empty());
}

/// A hook's own failure (or that of its retry, which inherits `hook_of`) ends the chain, even
/// when the hook project reports to itself.
fn a_hook_runs_failure_queues_no_other_hook(db: &Db) {
    let (s, epoch) = common::open(db);
    let mut to_itself = hooks();
    to_itself.insert(
        "alert".into(),
        FailureHook {
            project: "alert".into(),
            namespace: "ops".into(),
        },
    );
    let (failed, _) = claimed(&s, epoch, "q", None);
    let (id, token) = claimed(&s, epoch, "alert", Some(failed));
    let done = s
        .apply_with_hooks(
            epoch,
            &[finish(id, token, RunStatus::Failed, None)],
            &to_itself,
            10,
        )
        .unwrap();
    assert!(
        matches!(done[0], Applied::Done { hook: None, .. }),
        "{done:?}"
    );
    assert_eq!(hook_runs(&s).len(), 1, "only the hook run itself");
}

both_backends!(
    a_failed_end_queues_one_hook_run_in_its_transaction,
    every_failure_status_reports_and_nothing_else_does,
    a_retry_left_or_no_hook_configured_queues_none,
    a_hook_runs_failure_queues_no_other_hook,
);
