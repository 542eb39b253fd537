//! Store-level tests: the claim, the unique index, the state machine and a busy database.

use std::time::{Duration, Instant};

use store::*;

use crate::common::{claim_req as req, new_run, take_over, Db};

/// Can a second dequeue hand back the same run? It must not: a run handed out twice is started
/// twice, past every cap.
fn second_claim_of_one_run_hands_back_nothing(db: &Db) {
    let s = db.store();
    let epoch = take_over(&s);
    let id = s.enqueue(&new_run("p", "default"), 1).unwrap();
    let first = s.claim(epoch, &[req(id, "default")], 2).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].run.status, RunStatus::Starting);
    assert_ne!(first[0].run.claim_token, 0);
    let second = s.claim(epoch, &[req(id, "default")], 3).unwrap();
    assert!(second.is_empty(), "a claimed run was handed out again");
    // And one batch naming the run twice claims it once.
    let id2 = s.enqueue(&new_run("q", "default"), 4).unwrap();
    let both = s
        .claim(epoch, &[req(id2, "default"), req(id2, "default")], 5)
        .unwrap();
    assert_eq!(both.len(), 1);
}

/// The partial unique index: a second active run of one project cannot be written.
fn unique_index_refuses_second_active_run_of_a_project(db: &Db) {
    let s = db.store();
    let epoch = take_over(&s);
    let a = s.enqueue(&new_run("p", "default"), 1).unwrap();
    let b = s.enqueue(&new_run("p", "default"), 2).unwrap();
    let claimed = s
        .claim(epoch, &[req(a, "default"), req(b, "default")], 3)
        .unwrap();
    assert_eq!(
        claimed.len(),
        1,
        "two active runs of one project were written"
    );
    assert_eq!(s.get_run(b).unwrap().status, RunStatus::Queued);
    assert_eq!(s.active_runs().unwrap().len(), 1);
}

fn stale_epoch_is_fenced(db: &Db) {
    let s = db.store();
    let old = take_over(&s);
    let new = take_over(&s);
    assert_eq!(new, old + 1);
    let id = s.enqueue(&new_run("p", "default"), 1).unwrap();
    let err = s.claim(old, &[req(id, "default")], 2).unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    assert_eq!(s.get_run(id).unwrap().status, RunStatus::Queued);
}

fn queue_heads_give_best_run_per_project(db: &Db) {
    let s = db.store();
    let a1 = s.enqueue(&new_run("a", "x"), 1).unwrap();
    let _a2 = s.enqueue(&new_run("a", "x"), 2).unwrap();
    let mut hi = new_run("b", "y");
    let _b1 = s.enqueue(&new_run("b", "y"), 3).unwrap();
    hi.priority = 5;
    let b2 = s.enqueue(&hi, 4).unwrap();
    let mut later = new_run("c", "y");
    later.not_before = 1_000;
    s.enqueue(&later, 5).unwrap();
    let heads = s.queue_heads(10).unwrap();
    let got: Vec<(String, RunId)> = heads
        .iter()
        .map(|h| (h.project.clone(), h.run_id))
        .collect();
    assert_eq!(got, vec![("a".into(), a1), ("b".into(), b2)]);
    assert_eq!(s.queue_heads(1_000).unwrap().len(), 3);
    assert_eq!(s.next_not_before(10).unwrap(), Some(1_000));
}

fn transitions_follow_the_state_machine(db: &Db) {
    let s = db.store();
    let epoch = take_over(&s);
    let id = s.enqueue(&new_run("p", "default"), 1).unwrap();
    let c = s.claim(epoch, &[req(id, "default")], 2).unwrap();
    let token = c[0].run.claim_token;
    let run = |change| Transition {
        run_id: id,
        token,
        change,
    };
    // Stale token: skipped.
    let stale = s
        .apply(
            epoch,
            &[Transition {
                run_id: id,
                token: token + 7,
                change: Change::Running { pid: Some(1) },
            }],
            3,
        )
        .unwrap();
    assert!(matches!(stale[0], Applied::Skipped(_)));
    s.apply(epoch, &[run(Change::Running { pid: Some(42) })], 3)
        .unwrap();
    assert_eq!(s.get_run(id).unwrap().pid, Some(42));
    // A finish to a status that is not an end is not a transition.
    let err = s
        .apply(
            epoch,
            &[run(Change::Finish {
                status: RunStatus::Queued,
                exit_code: None,
                signal: None,
                reason: None,
                retry: None,
                finished_at: None,
            })],
            4,
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::IllegalTransition { .. }), "{err}");
    let done = s
        .apply(
            epoch,
            &[run(Change::Finish {
                status: RunStatus::Failed,
                exit_code: Some(3),
                signal: None,
                reason: None,
                retry: Some(100),
                finished_at: None,
            })],
            5,
        )
        .unwrap();
    let Applied::Done {
        status: RunStatus::Failed,
        retry: Some(retry),
        ..
    } = done[0]
    else {
        panic!("{done:?}")
    };
    let r = s.get_run(retry).unwrap();
    assert_eq!(
        (r.attempt, r.trigger, r.status),
        (2, Trigger::Retry, RunStatus::Queued)
    );
    assert_eq!(r.not_before, 100);
    // Applying the same finish twice is harmless.
    let again = s
        .apply(
            epoch,
            &[run(Change::Finish {
                status: RunStatus::Failed,
                exit_code: Some(3),
                signal: None,
                reason: None,
                retry: None,
                finished_at: Some(6),
            })],
            6,
        )
        .unwrap();
    assert!(matches!(again[0], Applied::Skipped(_)));
    let events = s.events_after(0).unwrap();
    let kinds: Vec<(Option<RunStatus>, RunStatus)> = events
        .iter()
        .filter(|e| e.run_id == id)
        .map(|e| (e.from, e.to))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (None, RunStatus::Queued),
            (Some(RunStatus::Queued), RunStatus::Starting),
            (Some(RunStatus::Starting), RunStatus::Running),
            (Some(RunStatus::Running), RunStatus::Failed),
        ]
    );
    let claim_ev = events.iter().find(|e| e.to == RunStatus::Starting).unwrap();
    assert_eq!(claim_ev.global_active, Some(1));
    assert_eq!(claim_ev.global_cap, Some(4));
}

fn cancel_queued_at_once_active_by_request(db: &Db) {
    let s = db.store();
    let epoch = take_over(&s);
    let q = s.enqueue(&new_run("p", "default"), 1).unwrap();
    assert_eq!(
        s.request_cancel(q, "cancelled by operator", 2).unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(s.get_run(q).unwrap().status, RunStatus::Cancelled);
    let a = s.enqueue(&new_run("p", "default"), 3).unwrap();
    s.claim(epoch, &[req(a, "default")], 4).unwrap();
    assert_eq!(
        s.request_cancel(a, "x", 5).unwrap(),
        CancelOutcome::Requested
    );
    let r = s.get_run(a).unwrap();
    assert_eq!(
        r.status,
        RunStatus::Starting,
        "status must not claim a stop that has not happened"
    );
    assert!(r.cancel_requested);
    assert_eq!(
        s.request_cancel(q, "x", 6).unwrap(),
        CancelOutcome::AlreadyFinished(RunStatus::Cancelled)
    );
    assert!(matches!(
        s.request_cancel(999, "x", 7),
        Err(StoreError::UnknownRun(999))
    ));
}

/// Another connection holds the write lock: a claim fails as busy after the busy timeout,
/// changes nothing, and succeeds once the lock is gone.
fn busy_database_fails_cleanly_and_retry_succeeds(db: &Db) {
    let s = db.store();
    let epoch = take_over(&s);
    let id = s.enqueue(&new_run("p", "default"), 1).unwrap();
    let other = db.hold_write_lock();
    let t = Instant::now();
    let err = s.claim(epoch, &[req(id, "default")], 2).unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "busy timeout not applied"
    );
    // Readers are not blocked by the writer (WAL; PostgreSQL's MVCC).
    assert_eq!(s.get_run(id).unwrap().status, RunStatus::Queued);
    other.release();
    assert_eq!(s.claim(epoch, &[req(id, "default")], 3).unwrap().len(), 1);
}

fn list_runs_filters_newest_first(db: &Db) {
    let s = db.store();
    for i in 0..5 {
        s.enqueue(&new_run(if i % 2 == 0 { "a" } else { "b" }, "default"), i)
            .unwrap();
    }
    let all = s.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(
        all.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![5, 4, 3, 2, 1]
    );
    let a = s
        .list_runs(&RunFilter {
            project: Some("a".into()),
            status: Some(RunStatus::Queued),
            limit: Some(2),
            ..RunFilter::default()
        })
        .unwrap();
    assert_eq!(a.iter().map(|r| r.id).collect::<Vec<_>>(), vec![5, 3]);
}

/// A run whose cancel was requested while it was starting, and which then proves never to have
/// started, ends cancelled instead of going back to the queue (where it would be claimed,
/// signalled and requeued again, in a loop).
fn requeue_of_a_cancelled_run_ends_it(db: &Db) {
    let s = db.store();
    let epoch = take_over(&s);
    let id = s.enqueue(&new_run("p", "default"), 1).unwrap();
    let token = s.claim(epoch, &[req(id, "default")], 2).unwrap()[0]
        .run
        .claim_token;
    assert_eq!(
        s.request_cancel(id, "x", 3).unwrap(),
        CancelOutcome::Requested
    );
    s.apply(
        epoch,
        &[Transition {
            run_id: id,
            token,
            change: Change::Requeue {
                reason: "never started".into(),
            },
        }],
        4,
    )
    .unwrap();
    let r = s.get_run(id).unwrap();
    assert_eq!(r.status, RunStatus::Cancelled);
    assert!(s.queue_heads(10).unwrap().is_empty());
}

/// A database restored from a backup repeats run ids; the claim token of the new run with a
/// reused id must still differ from the old run's, whose files are still in runs/.
fn claim_tokens_do_not_repeat_when_run_ids_do(db: &Db) {
    let tokens: Vec<u64> = (0..2)
        .map(|i| {
            // The second database is a new one on the same backend.
            let fresh;
            let db = if i == 0 {
                db
            } else {
                fresh = if db.is_postgres() {
                    Db::postgres().unwrap()
                } else {
                    Db::sqlite()
                };
                &fresh
            };
            let s = db.store();
            let epoch = take_over(&s);
            let id = s.enqueue(&new_run("p", "default"), 1).unwrap();
            assert_eq!(
                id, 1,
                "a fresh database starts ids at 1, like a restored one repeats them"
            );
            s.claim(epoch, &[req(id, "default")], 2).unwrap()[0]
                .run
                .claim_token
        })
        .collect();
    assert_ne!(tokens[0], tokens[1]);
}

/// The change probe sees every commit, whoever made it: this store's pool, another `Store` on
/// the same file, and a plain SQLite connection (another program). Without it the daemon's tick
/// would skip EVALs that something written behind its back needed.
fn change_probe_sees_commits_from_anyone(db: &Db) {
    let s = db.store();
    let mut probe = s.change_probe().unwrap();
    assert!(
        probe.changed().unwrap(),
        "the first look always says changed"
    );
    assert!(!probe.changed().unwrap(), "nothing was committed");
    // Reads commit nothing.
    s.queue_heads(now_ms()).unwrap();
    assert!(!probe.changed().unwrap());
    s.enqueue(&new_run("a", "default"), now_ms()).unwrap();
    assert!(probe.changed().unwrap(), "a commit through the pool");
    assert!(!probe.changed().unwrap());
    let other = db.store_with(Duration::from_secs(5));
    other.enqueue(&new_run("b", "default"), now_ms()).unwrap();
    assert!(probe.changed().unwrap(), "a commit through another store");
    let sql = "UPDATE runs SET priority = 5 WHERE project = 'a'";
    db.exec(sql, sql);
    assert!(probe.changed().unwrap(), "a commit by another program");
    assert!(!probe.changed().unwrap());
}

/// Random queues for [`queue_heads_match_their_definition`]: (project 0..6, priority, delay,
/// claim it?) per run, and the instant asked about.
type Queue = Vec<(u8, i64, i64, bool)>;

/// `queue_heads` (an index walk with a second seek for a project whose best run is delayed)
/// agrees with the plain definition: for each project, its queued run with `not_before <=
/// now` of highest priority, then lowest id; projects in name order. Runs are queued in
/// random projects with random priorities and delays, and some are claimed (so no longer
/// queued).
fn queue_heads_match_their_definition(
    db: &Db,
    runs: Queue,
    now: Millis,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let s = db.store();
    let epoch = take_over(&s);
    let mut queued: Vec<(String, i64, i64, RunId)> = Vec::new();
    for (project, priority, delay, claim) in runs {
        let project = format!("p{project}");
        let mut n = new_run(&project, "default");
        n.priority = priority;
        n.not_before = delay;
        let id = s.enqueue(&n, 0).unwrap();
        // Claim some (at most one active per project, as the unique index demands).
        let claimed = claim
            && delay == 0
            && !s
                .active_runs()
                .unwrap()
                .iter()
                .any(|r| r.project == project)
            && s.claim(
                epoch,
                &[ClaimRequest {
                    global_cap: 1000,
                    ..req(id, "default")
                }],
                0,
            )
            .unwrap()
            .len()
                == 1;
        if !claimed {
            queued.push((project, priority, delay, id));
        }
    }
    let mut expected: std::collections::BTreeMap<String, (i64, RunId)> = Default::default();
    for (project, priority, delay, id) in &queued {
        if *delay > now {
            continue;
        }
        let better = match expected.get(project) {
            None => true,
            Some((p, i)) => (*priority, std::cmp::Reverse(*id)) > (*p, std::cmp::Reverse(*i)),
        };
        if better {
            expected.insert(project.clone(), (*priority, *id));
        }
    }
    let expected: Vec<(String, RunId)> = expected.into_iter().map(|(p, (_, id))| (p, id)).collect();
    let got: Vec<(String, RunId)> = s
        .queue_heads(now)
        .unwrap()
        .into_iter()
        .map(|h| (h.project, h.run_id))
        .collect();
    proptest::prop_assert_eq!(got, expected);
    let next = queued.iter().map(|q| q.2).filter(|d| *d > now).min();
    proptest::prop_assert_eq!(s.next_not_before(now).unwrap(), next);
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// [`queue_heads_match_their_definition`] on SQLite.
    #[test]
    fn sqlite_queue_heads_match_their_definition(
        runs in proptest::collection::vec((0u8..6, -2i64..3, 0i64..4, proptest::bool::ANY), 0..60),
        now in 0i64..4,
    ) {
        queue_heads_match_their_definition(&Db::sqlite(), runs, now)?;
    }
}

proptest::proptest! {
    // Fewer cases: each one creates a PostgreSQL database.
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(16))]

    /// [`queue_heads_match_their_definition`] on PostgreSQL.
    #[test]
    fn postgres_queue_heads_match_their_definition(
        runs in proptest::collection::vec((0u8..6, -2i64..3, 0i64..4, proptest::bool::ANY), 0..60),
        now in 0i64..4,
    ) {
        if let Some(db) = Db::postgres() {
            queue_heads_match_their_definition(&db, runs, now)?;
        }
    }
}

/// Claims one queued run of `project`; returns (epoch, id, token).
fn claimed(s: &Store, project: &str) -> (i64, RunId, u64) {
    let epoch = take_over(s);
    let id = s.enqueue(&new_run(project, "default"), 1).unwrap();
    let c = s.claim(epoch, &[req(id, "default")], 2).unwrap();
    (epoch, id, c[0].run.claim_token)
}

fn finish(
    id: RunId,
    token: u64,
    status: RunStatus,
    code: Option<i32>,
    at: Option<Millis>,
) -> Transition {
    Transition {
        run_id: id,
        token,
        change: Change::Finish {
            status,
            exit_code: code,
            signal: None,
            reason: None,
            // What a retry policy with attempts left asks for.
            retry: matches!(
                status,
                RunStatus::Failed | RunStatus::TimedOut | RunStatus::Lost
            )
            .then_some(0),
            finished_at: at,
        },
    }
}

/// A cancel, once accepted, is final: the run's end queues no retry whatever the policy asked,
/// keeps the real status, and its note says how the cancel and the end relate.
fn an_accepted_cancel_stops_every_retry_and_the_note_tells_what_happened(db: &Db) {
    let s = db.store();
    // Ended on its own after the request (the daemon was down, or the signal came too late).
    let (epoch, id, token) = claimed(&s, "late");
    s.request_cancel(id, "cancelled by operator", 10).unwrap();
    let r = s.get_run(id).unwrap();
    assert_eq!(r.reason, None, "a request is not an outcome: {r:?}");
    let done = s
        .apply(
            epoch,
            &[finish(id, token, RunStatus::Failed, Some(1), Some(20))],
            30,
        )
        .unwrap();
    assert!(
        matches!(
            done[0],
            Applied::Done {
                status: RunStatus::Failed,
                retry: None,
                ..
            }
        ),
        "{done:?}"
    );
    let r = s.get_run(id).unwrap();
    assert_eq!((r.status, r.exit_code), (RunStatus::Failed, Some(1)));
    assert_eq!(
        r.reason.as_deref(),
        Some("cancel requested while it ran, but it ended before the cancel reached it; no retry after a cancel")
    );

    // Ended before the request was made: it says so.
    let (epoch, id, token) = claimed(&s, "after");
    s.request_cancel(id, "cancelled by operator", 50).unwrap();
    s.apply(
        epoch,
        &[finish(id, token, RunStatus::Succeeded, Some(0), Some(40))],
        60,
    )
    .unwrap();
    let r = s.get_run(id).unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.reason.as_deref(), Some("cancel requested after it ended"));

    // Stopped by the cancel: the request's words.
    let (epoch, id, token) = claimed(&s, "stopped");
    s.request_cancel(id, "cancelled by operator", 70).unwrap();
    s.request_cancel(id, "a second request", 71).unwrap();
    s.apply(
        epoch,
        &[finish(id, token, RunStatus::Cancelled, None, Some(80))],
        90,
    )
    .unwrap();
    let r = s.get_run(id).unwrap();
    assert_eq!(r.reason.as_deref(), Some("cancelled by operator"));

    // Lost after a request: no retry either.
    let (epoch, id, token) = claimed(&s, "lost");
    s.request_cancel(id, "cancelled by operator", 100).unwrap();
    let done = s
        .apply(
            epoch,
            &[finish(id, token, RunStatus::Lost, None, None)],
            110,
        )
        .unwrap();
    assert!(
        matches!(done[0], Applied::Done { retry: None, .. }),
        "{done:?}"
    );

    // Only runs of this test exist: no retry was ever queued.
    let queued = s
        .list_runs(&RunFilter {
            status: Some(RunStatus::Queued),
            ..RunFilter::default()
        })
        .unwrap();
    assert!(queued.is_empty(), "{queued:?}");
}

/// `cancelled` with no request: something outside fleet stopped the command, and the note must
/// not pass it off as an operator's cancel. Without a request, a retry stays as the policy said.
fn a_stop_nobody_requested_is_noted_as_such(db: &Db) {
    let s = db.store();
    let (epoch, id, token) = claimed(&s, "outside");
    s.apply(
        epoch,
        &[finish(id, token, RunStatus::Cancelled, None, Some(5))],
        6,
    )
    .unwrap();
    let r = s.get_run(id).unwrap();
    assert_eq!(
        r.reason.as_deref(),
        Some("stopped by a termination signal not sent by fleet")
    );
    let (epoch, id, token) = claimed(&s, "plain");
    let done = s
        .apply(
            epoch,
            &[finish(id, token, RunStatus::Failed, Some(2), Some(5))],
            6,
        )
        .unwrap();
    assert!(
        matches!(done[0], Applied::Done { retry: Some(_), .. }),
        "{done:?}"
    );
    assert_eq!(s.get_run(id).unwrap().reason, None);
}

/// A cancelled claim that never started ends `cancelled` with the request's words.
fn a_cancel_before_the_start_keeps_the_requests_words(db: &Db) {
    let s = db.store();
    let (epoch, id, token) = claimed(&s, "early");
    s.request_cancel(id, "cancelled by operator", 3).unwrap();
    s.apply(
        epoch,
        &[Transition {
            run_id: id,
            token,
            change: Change::Requeue {
                reason: "never started".into(),
            },
        }],
        4,
    )
    .unwrap();
    let r = s.get_run(id).unwrap();
    assert_eq!(r.status, RunStatus::Cancelled);
    assert_eq!(
        r.reason.as_deref(),
        Some("cancelled by operator, before it started")
    );
}

/// `cancel_queued_runs` ends only the listed runs still queued: one claimed meanwhile, and one
/// queued after the list was read, are left alone.
fn cancelling_listed_queued_runs_spares_the_others(db: &Db) {
    let s = db.store();
    let epoch = take_over(&s);
    let a = s.enqueue(&new_run("gone", "default"), 1).unwrap();
    let b = s.enqueue(&new_run("gone", "default"), 2).unwrap();
    s.claim(epoch, &[req(a, "default")], 3).unwrap();
    let later = s.enqueue(&new_run("gone", "default"), 4).unwrap();
    let done = s.cancel_queued_runs(&[a, b], "project removed", 5).unwrap();
    assert_eq!(done, vec![b]);
    assert_eq!(s.get_run(a).unwrap().status, RunStatus::Starting);
    assert_eq!(s.get_run(b).unwrap().status, RunStatus::Cancelled);
    assert_eq!(
        s.get_run(b).unwrap().reason.as_deref(),
        Some("project removed")
    );
    assert_eq!(s.get_run(later).unwrap().status, RunStatus::Queued);
}

both_backends!(
    second_claim_of_one_run_hands_back_nothing,
    unique_index_refuses_second_active_run_of_a_project,
    stale_epoch_is_fenced,
    queue_heads_give_best_run_per_project,
    transitions_follow_the_state_machine,
    cancel_queued_at_once_active_by_request,
    busy_database_fails_cleanly_and_retry_succeeds,
    list_runs_filters_newest_first,
    requeue_of_a_cancelled_run_ends_it,
    claim_tokens_do_not_repeat_when_run_ids_do,
    change_probe_sees_commits_from_anyone,
    an_accepted_cancel_stops_every_retry_and_the_note_tells_what_happened,
    a_stop_nobody_requested_is_noted_as_such,
    a_cancel_before_the_start_keeps_the_requests_words,
    cancelling_listed_queued_runs_spares_the_others,
);
