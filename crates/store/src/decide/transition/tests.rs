//! Unit tests of the transition decision: no database, the plan itself is checked.

use super::*;
use crate::FailureHook;

/// A run of project `web` in `status`, at claim 7, attempt 1.
fn run(status: RunStatus) -> Run {
    Run {
        id: 42,
        project: "web".into(),
        namespace: "default".into(),
        status,
        attempt: 1,
        trigger: Trigger::Manual,
        occurrence: None,
        priority: 3,
        not_before: 0,
        enqueued_at: 0,
        started_at: Some(10),
        finished_at: None,
        pid: Some(99),
        exit_code: None,
        signal: None,
        reason: None,
        cancel_requested: false,
        claim_token: 7,
        epoch: Some(1),
        retry_of: None,
        args: vec!["--fast".into()],
        env: vec![("K".into(), "V".into())],
        rerun_of: None,
        hook_of: None,
        seat: 0,
        host: None,
    }
}

/// `web` reports its failures to the project `pager`.
fn hooks() -> FailureHooks {
    let mut h = FailureHooks::new();
    h.insert(
        "web".into(),
        FailureHook {
            project: "pager".into(),
            namespace: "ops".into(),
        },
    );
    h
}

fn finish(status: RunStatus, retry: Option<Millis>) -> Transition {
    Transition {
        run_id: 42,
        token: 7,
        change: Change::Finish {
            status,
            exit_code: Some(1),
            signal: None,
            reason: None,
            retry,
            finished_at: Some(500),
        },
    }
}

fn requeue() -> Transition {
    Transition {
        run_id: 42,
        token: 7,
        change: Change::Requeue {
            reason: "never started".into(),
        },
    }
}

fn plan(d: Result<Decision>) -> TransitionPlan {
    match d.expect("no error") {
        Decision::Apply(p) => *p,
        Decision::Skip(why) => panic!("skipped: {why}"),
    }
}

/// The plan of `t` for a run in `status` whose operator asked, at `asked` (UTC ms), for a
/// cancel ("cancelled by operator").
fn plan_after_cancel(status: RunStatus, asked: Millis, t: &Transition) -> TransitionPlan {
    let mut r = run(status);
    r.cancel_requested = true;
    let cancel = CancelRequest {
        at: Some(asked),
        reason: Some("cancelled by operator"),
    };
    plan(plan_transition(&r, t, Some(cancel), &hooks(), 1000))
}

#[test]
fn a_transition_for_an_older_claim_is_skipped() {
    let mut t = finish(RunStatus::Failed, None);
    t.token = 6;
    let d = plan_transition(&run(RunStatus::Running), &t, None, &hooks(), 1000).unwrap();
    assert!(
        matches!(&d, Decision::Skip(why) if why.contains("claim 7") && why.contains("claim 6")),
        "{d:?}"
    );
}

#[test]
fn a_transition_for_a_run_already_ended_is_skipped() {
    let t = finish(RunStatus::Failed, None);
    let d = plan_transition(&run(RunStatus::Succeeded), &t, None, &hooks(), 1000).unwrap();
    assert!(
        matches!(&d, Decision::Skip(why) if why.contains("already succeeded")),
        "{d:?}"
    );
}

#[test]
fn a_finish_to_a_status_that_is_not_terminal_is_refused() {
    let t = finish(RunStatus::Running, None);
    let e = plan_transition(&run(RunStatus::Starting), &t, None, &hooks(), 1000).unwrap_err();
    assert!(matches!(e, StoreError::IllegalTransition { .. }), "{e:?}");
}

/// A run moved back to `queued` under its running claim (another program's write): the
/// claim's start and end reports are skipped with a reason, never an error — an error would
/// stop every EVAL after it, for every project.
#[test]
fn a_start_or_an_end_of_a_run_queued_again_is_skipped_not_an_error() {
    let start = Transition {
        run_id: 42,
        token: 7,
        change: Change::Running { pid: Some(5) },
    };
    for (t, what) in [
        (start, "start"),
        (
            finish(RunStatus::Succeeded, None),
            "end (succeeded, exit code 1)",
        ),
    ] {
        let d = plan_transition(&run(RunStatus::Queued), &t, None, &hooks(), 1000).unwrap();
        assert!(
            matches!(&d, Decision::Skip(why) if why.contains("queued again") && why.contains(what)),
            "{d:?}"
        );
    }
}

#[test]
fn a_requeue_goes_back_to_queued_and_frees_the_seat() {
    let p = plan(plan_transition(
        &run(RunStatus::Starting),
        &requeue(),
        None,
        &hooks(),
        1000,
    ));
    assert_eq!(p.to, RunStatus::Queued);
    assert_eq!(p.write, RunWrite::Requeue);
    assert_eq!(p.detail.as_deref(), Some("never started"));
    assert!(p.frees_seats);
    assert!(p.retry.is_none() && p.hook.is_none());
}

/// A run recorded `running` started: "never started" (its run files removed under it) ends it
/// `lost`, not retried (its command may still run) and with its failure hook; never an error
/// that would stop every EVAL.
#[test]
fn a_requeue_of_a_running_run_ends_it_lost_without_a_retry() {
    let p = plan(plan_transition(
        &run(RunStatus::Running),
        &requeue(),
        None,
        &hooks(),
        1000,
    ));
    assert_eq!(p.to, RunStatus::Lost);
    assert!(
        matches!(&p.write, RunWrite::End { status: RunStatus::Lost, note: Some(n), .. }
            if n.contains("recorded running")),
        "{:?}",
        p.write
    );
    assert!(p.frees_seats);
    assert!(p.retry.is_none() && p.hook.is_some());
}

#[test]
fn a_cancel_requested_requeue_becomes_cancelled() {
    let p = plan_after_cancel(RunStatus::Starting, 400, &requeue());
    assert_eq!(p.to, RunStatus::Cancelled);
    let note = "cancelled by operator, before it started".to_string();
    assert_eq!(
        p.write,
        RunWrite::End {
            status: RunStatus::Cancelled,
            exit_code: None,
            signal: None,
            note: Some(note.clone()),
            at: 1000,
            clear_pid: true,
        }
    );
    assert_eq!(p.detail, Some(note));
    assert!(p.hook.is_none(), "a cancel is no failure");
}

#[test]
fn a_failed_end_with_a_retry_queues_the_retry_and_no_hook() {
    let p = plan(plan_transition(
        &run(RunStatus::Running),
        &finish(RunStatus::Failed, Some(2000)),
        None,
        &hooks(),
        1000,
    ));
    let retry = p.retry.expect("a retry");
    assert_eq!(retry.attempt, 2);
    assert_eq!(retry.retry_of, 42);
    assert_eq!(retry.run.trigger, Trigger::Retry);
    assert_eq!(retry.run.not_before, 2000);
    assert_eq!(retry.run.priority, 3);
    assert_eq!(retry.run.args, vec!["--fast".to_string()]);
    assert!(p.hook.is_none(), "the hook waits for the last attempt");
    assert!(p.frees_seats);
}

#[test]
fn a_failed_end_without_a_retry_queues_the_hook() {
    let p = plan(plan_transition(
        &run(RunStatus::Running),
        &finish(RunStatus::Failed, None),
        None,
        &hooks(),
        1000,
    ));
    assert!(p.retry.is_none());
    let hook = p.hook.expect("a hook run");
    assert_eq!(hook.project, "pager");
    assert_eq!(hook.namespace, "ops");
    assert_eq!(hook.trigger, Trigger::OnFailure);
    assert_eq!(hook.hook_of, Some(42));
    assert!(
        matches!(p.write, RunWrite::End { at: 500, .. }),
        "the shim's instant"
    );
}

#[test]
fn a_success_queues_no_hook() {
    let p = plan(plan_transition(
        &run(RunStatus::Running),
        &finish(RunStatus::Succeeded, None),
        None,
        &hooks(),
        1000,
    ));
    assert!(p.hook.is_none());
}

#[test]
fn a_hooks_failure_queues_no_hook() {
    let mut r = run(RunStatus::Running);
    r.hook_of = Some(1);
    let p = plan(plan_transition(
        &r,
        &finish(RunStatus::Failed, None),
        None,
        &hooks(),
        1000,
    ));
    assert!(p.hook.is_none(), "a hook's failure must not start a chain");
}

#[test]
fn a_cancel_requested_end_queues_no_retry_and_says_so() {
    let p = plan_after_cancel(
        RunStatus::Running,
        600,
        &finish(RunStatus::Failed, Some(2000)),
    );
    assert!(p.retry.is_none(), "a cancel is final");
    assert!(p.hook.is_none(), "nor does a hook follow a cancel");
    assert_eq!(
        p.detail.as_deref(),
        Some("cancel requested after it ended; no retry after a cancel")
    );
}

#[test]
fn a_cancel_requested_end_with_its_end_unknown_queues_no_hook_and_says_so() {
    let p = plan_after_cancel(RunStatus::Running, 600, &finish(RunStatus::Lost, None));
    assert!(p.retry.is_none());
    assert!(p.hook.is_none(), "the operator asked for this run to stop");
    assert_eq!(p.to, RunStatus::Lost);
    assert!(
        p.detail.as_deref().is_some_and(|d| d.ends_with(
            "cancel requested before its end was known; no failure hook after a cancel"
        )),
        "{:?}",
        p.detail
    );
}

#[test]
fn a_cancelled_end_without_a_request_names_an_outside_signal() {
    let note = end_note(
        &Ending {
            status: RunStatus::Cancelled,
            reason: None,
            finished_at: None,
            retry_due: false,
            hook_due: false,
        },
        None,
    );
    assert_eq!(
        note.as_deref(),
        Some("stopped by a termination signal not sent by fleet")
    );
}
