//! Seats: a project's `max_parallel` is enforced by the database, not only by the packers. Each
//! active run holds a distinct seat below the limit (unique index over active runs), and the
//! claim takes the lowest free one inside its transaction or claims nothing. Pauses: a paused
//! project or namespace is claimed nothing, and its schedule's occurrences are skipped.

use std::time::Duration;

use store::*;

use crate::common;
use crate::common::Db;

fn new_run(project: &str, ns: &str) -> NewRun {
    NewRun {
        project: project.into(),
        namespace: ns.into(),
        trigger: Trigger::Manual,
        ..Default::default()
    }
}

fn req(id: RunId, ns: &str, max_parallel: u32) -> ClaimRequest {
    ClaimRequest {
        run_id: id,
        namespace: ns.into(),
        global_cap: 100,
        namespace_cap: None,
        max_parallel,
        host_cap: None,
        config_version: None,
    }
}

fn seats(s: &Store, project: &str) -> Vec<u32> {
    let mut seats: Vec<u32> = s
        .active_runs()
        .unwrap()
        .into_iter()
        .filter(|r| r.project == project)
        .map(|r| r.seat)
        .collect();
    seats.sort_unstable();
    seats
}

fn a_fourth_active_run_is_refused_at_max_parallel_three(db: &Db) {
    let (s, epoch) = common::open(db);
    let ids: Vec<RunId> = (0..5)
        .map(|i| s.enqueue(&new_run("p", "default"), i).unwrap())
        .collect();
    // A packer that asks for all five (a bug) still gets three: the claim takes seats 0, 1, 2.
    let all: Vec<ClaimRequest> = ids.iter().map(|&id| req(id, "default", 3)).collect();
    let claimed = s.claim(epoch, &all, 10).unwrap();
    assert_eq!(claimed.len(), 3, "{claimed:?}");
    assert_eq!(seats(&s, "p"), [0, 1, 2]);
    // A fourth claim, alone, later: refused.
    assert!(s
        .claim(epoch, &[req(ids[3], "default", 3)], 11)
        .unwrap()
        .is_empty());
    assert_eq!(s.get_run(ids[3]).unwrap().status, RunStatus::Queued);
    // Written by hand, a fourth active row on a taken seat is refused by the index.
    let sql = format!(
        "UPDATE runs SET status = 'starting', seat = 1 WHERE id = {}",
        ids[3]
    );
    let by_hand = db.try_exec(&sql, &sql);
    assert!(by_hand.is_err(), "a second run on seat 1 was written");
    // Seat 1 frees up: the next claim takes it (the lowest free seat), not seat 3.
    let second = &claimed[1].run;
    assert_eq!(second.seat, 1);
    s.apply(
        epoch,
        &[Transition {
            run_id: second.id,
            token: second.claim_token,
            change: Change::Finish {
                status: RunStatus::Succeeded,
                exit_code: Some(0),
                signal: None,
                reason: None,
                retry: None,
                finished_at: None,
            },
        }],
        12,
    )
    .unwrap();
    let next = s.claim(epoch, &[req(ids[3], "default", 3)], 13).unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].run.seat, 1);
    assert_eq!(seats(&s, "p"), [0, 1, 2]);
    // The default, one seat, is today's rule: one active run per project.
    let q1 = s.enqueue(&new_run("q", "default"), 14).unwrap();
    let q2 = s.enqueue(&new_run("q", "default"), 15).unwrap();
    let claimed = s
        .claim(epoch, &[req(q1, "default", 1), req(q2, "default", 1)], 16)
        .unwrap();
    assert_eq!(claimed.len(), 1);
}

/// Four connections claim the same project's runs at once (each its own pool, as several
/// processes would): never more than three active.
fn concurrent_claims_never_exceed_max_parallel(db: &Db) {
    let (s, epoch) = common::open(db);
    let ids: Vec<RunId> = (0..40)
        .map(|i| s.enqueue(&new_run("p", "default"), i).unwrap())
        .collect();
    let total: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let ids = &ids;
                scope.spawn(move || {
                    let s = db.store_with(Duration::from_secs(10));
                    let mut claimed = 0;
                    // Each thread tries every run, in its own order.
                    for k in 0..ids.len() {
                        let id = ids[(k * (t + 1) + t) % ids.len()];
                        claimed += s.claim(epoch, &[req(id, "default", 3)], 100).unwrap().len();
                        assert!(s.active_runs().unwrap().len() <= 3);
                    }
                    claimed
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(total, 3, "claims handed out past max_parallel");
    assert_eq!(seats(&s, "p"), [0, 1, 2]);
}

fn a_paused_project_or_namespace_is_claimed_nothing_until_resumed(db: &Db) {
    let (s, epoch) = common::open(db);
    let a = s.enqueue(&new_run("a", "ops"), 1).unwrap();
    let b = s.enqueue(&new_run("b", "dev"), 2).unwrap();
    assert!(s.pause(HoldKind::Project, "a", Some("me"), 3).unwrap());
    assert!(!s.pause(HoldKind::Project, "a", Some("you"), 4).unwrap());
    assert!(s.pause(HoldKind::Namespace, "dev", None, 5).unwrap());
    let paused = s.paused().unwrap();
    assert_eq!(paused.holding("a", "ops").map(|p| p.since), Some(3));
    assert_eq!(
        paused.holding("a", "ops").and_then(|p| p.by.clone()),
        Some("me".into())
    );
    assert_eq!(
        paused.holding("b", "dev").map(|p| p.kind),
        Some(HoldKind::Namespace)
    );
    assert!(paused.holding("c", "ops").is_none());
    let claimed = s
        .claim(epoch, &[req(a, "ops", 1), req(b, "dev", 1)], 6)
        .unwrap();
    assert!(claimed.is_empty(), "{claimed:?}");
    assert!(s.resume(HoldKind::Project, "a").unwrap());
    assert!(!s.resume(HoldKind::Project, "a").unwrap());
    let claimed = s
        .claim(epoch, &[req(a, "ops", 1), req(b, "dev", 1)], 7)
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].run.id, a);
    assert!(s.resume(HoldKind::Namespace, "dev").unwrap());
    assert_eq!(s.claim(epoch, &[req(b, "dev", 1)], 8).unwrap().len(), 1);
}

fn an_occurrence_of_a_paused_project_is_recorded_as_skipped(db: &Db) {
    let (s, epoch) = common::open(db);
    s.pause(HoldKind::Project, "p", None, 1).unwrap();
    let fired = s
        .fire_schedule(
            epoch,
            &common::req(None, Some(60_000), OverlapPolicy::Queue),
            60_000,
        )
        .unwrap();
    assert!(fired.queued.is_none());
    let skipped = s
        .get_run(fired.skipped_run.expect("a skip recorded"))
        .unwrap();
    assert_eq!(skipped.status, RunStatus::Cancelled);
    assert!(
        skipped.reason.as_deref().unwrap_or("").contains("paused"),
        "{skipped:?}"
    );
    assert_eq!(s.schedules().unwrap()[0].skipped_total, 1);
    s.resume(HoldKind::Project, "p").unwrap();
    let fired = s
        .fire_schedule(
            epoch,
            &common::req(Some(60_000), Some(120_000), OverlapPolicy::Queue),
            120_000,
        )
        .unwrap();
    assert!(fired.queued.is_some(), "{fired:?}");
}

/// Overlap counts up to max_parallel: forbid skips only once every seat is taken (queued or
/// active), replace stops the oldest active run only once the active runs fill the seats.
fn overlap_policies_count_up_to_max_parallel(db: &Db) {
    let (s, epoch) = common::open(db);
    let mut forbid = common::req(None, Some(60_000), OverlapPolicy::Forbid);
    forbid.max_parallel = 2;
    let first = s.fire_schedule(epoch, &forbid, 60_000).unwrap();
    assert!(first.queued.is_some());
    let mut second = common::req(Some(60_000), Some(120_000), OverlapPolicy::Forbid);
    second.max_parallel = 2;
    let second = s.fire_schedule(epoch, &second, 120_000).unwrap();
    assert!(
        second.queued.is_some(),
        "one queued run leaves a seat: {second:?}"
    );
    let mut third = common::req(Some(120_000), Some(180_000), OverlapPolicy::Forbid);
    third.max_parallel = 2;
    let third = s.fire_schedule(epoch, &third, 180_000).unwrap();
    assert!(
        third.skipped_run.is_some(),
        "two runs fill two seats: {third:?}"
    );

    // Both active: replace stops the oldest, and only then.
    let ids = [first.queued.unwrap(), second.queued.unwrap()];
    let claimed = s
        .claim(
            epoch,
            &[req(ids[0], "default", 2), req(ids[1], "default", 2)],
            190_000,
        )
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let mut replace = common::req(Some(180_000), Some(240_000), OverlapPolicy::Replace);
    replace.max_parallel = 3;
    let kept = s.fire_schedule(epoch, &replace, 240_000).unwrap();
    assert_eq!(kept.replaced, None, "a free seat needs no replacement");
    let mut replace = common::req(Some(240_000), Some(300_000), OverlapPolicy::Replace);
    replace.max_parallel = 2;
    let replaced = s.fire_schedule(epoch, &replace, 300_000).unwrap();
    assert_eq!(replaced.replaced, Some(ids[0]));
}

/// The filters of `fleet runs`: several statuses, namespace, trigger, an enqueue window; each
/// absent filter matches every run.
fn run_filters_combine(db: &Db) {
    let (s, epoch) = common::open(db);
    let a = s.enqueue(&new_run("a", "ops"), 1_000).unwrap();
    let b = s.enqueue(&new_run("b", "dev"), 2_000).unwrap();
    let mut sched = new_run("c", "ops");
    sched.trigger = Trigger::Schedule;
    sched.occurrence = Some(3_000);
    let c = s.enqueue(&sched, 3_000).unwrap();
    s.claim(epoch, &[req(a, "ops", 1)], 4_000).unwrap();
    let ids = |f: RunFilter| -> Vec<RunId> {
        s.list_runs(&f).unwrap().into_iter().map(|r| r.id).collect()
    };
    assert_eq!(ids(RunFilter::default()), [c, b, a]);
    assert_eq!(
        ids(RunFilter {
            statuses: vec![RunStatus::Starting, RunStatus::Running],
            ..RunFilter::default()
        }),
        [a]
    );
    assert_eq!(
        ids(RunFilter {
            statuses: vec![RunStatus::Queued, RunStatus::Starting],
            namespace: Some("ops".into()),
            ..RunFilter::default()
        }),
        [c, a]
    );
    assert_eq!(
        ids(RunFilter {
            trigger: Some(Trigger::Schedule),
            ..RunFilter::default()
        }),
        [c]
    );
    assert_eq!(
        ids(RunFilter {
            since: Some(2_000),
            until: Some(2_999),
            ..RunFilter::default()
        }),
        [b]
    );
}

/// Caps of a million — the largest the config accepts — cost what the runs active under them
/// need: three claims take three seats at once, and on PostgreSQL make only the seat rows they
/// may need, where a first claim that made a row per unit of every cap took seconds and
/// hundreds of megabytes (and a cap of a few billion never finished).
fn a_cap_of_a_million_costs_what_its_runs_need(db: &Db) {
    let (s, epoch) = common::open(db);
    let ids: Vec<RunId> = (0..3)
        .map(|i| s.enqueue(&new_run("p", "ns"), i).unwrap())
        .collect();
    let million = |id| ClaimRequest {
        global_cap: 1_000_000,
        namespace_cap: Some(1_000_000),
        ..req(id, "ns", 1_000_000)
    };
    let claimed = s
        .claim(
            epoch,
            &ids.iter().map(|&id| million(id)).collect::<Vec<_>>(),
            10,
        )
        .unwrap();
    assert_eq!(claimed.len(), 3, "{claimed:?}");
    assert_eq!(seats(&s, "p"), [0, 1, 2]);
    // On PostgreSQL, the rows made for each cap: twice the three wanted, and a margin of 64
    // for other hosts' claims.
    if let Some(rows) = db.pg_count("SELECT count(*) FROM cap_seats") {
        assert_eq!(rows, 2 * (2 * 3 + 64), "seat rows made");
    }
    // One more, alone, later: rows made for four.
    let id = s.enqueue(&new_run("p", "ns"), 11).unwrap();
    assert_eq!(s.claim(epoch, &[million(id)], 12).unwrap().len(), 1);
    assert_eq!(seats(&s, "p"), [0, 1, 2, 3]);
    if let Some(rows) = db.pg_count("SELECT count(*) FROM cap_seats") {
        assert_eq!(rows, 2 * (2 * (3 + 1) + 64), "seat rows made");
    }
}

both_backends!(
    a_cap_of_a_million_costs_what_its_runs_need,
    a_fourth_active_run_is_refused_at_max_parallel_three,
    concurrent_claims_never_exceed_max_parallel,
    a_paused_project_or_namespace_is_claimed_nothing_until_resumed,
    an_occurrence_of_a_paused_project_is_recorded_as_skipped,
    overlap_policies_count_up_to_max_parallel,
    run_filters_combine,
);
