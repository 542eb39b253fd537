//! The table of queue heads the store keeps up to date as runs change: after any sequence of
//! enqueues, claims, ends (with and without a retry), requeues, cancels, prunes, priority and
//! delay changes, deletes and moves to another project — through the store or by another
//! program's plain SQL — it holds exactly each project's first queued run in queue order, and
//! `Store::queue_heads` built on it still gives each project's best ready run.

use std::collections::BTreeMap;

use store::*;

use crate::common::{claim_req, new_run, take_over, Db};

/// One row: project, run id, namespace, priority, not_before.
type Head = (String, i64, String, i64, i64);

/// The heads as the table holds them, in project order.
const TABLE: &str = "SELECT project, run_id, namespace, priority, not_before FROM queue_heads \
                     ORDER BY project";

/// The heads by their definition, read from `runs` alone: for each project, the queued run no
/// other queued run of the project comes before (higher priority, or equal and older).
const DEFINITION: &str = "SELECT project, id, namespace, priority, not_before FROM runs r \
     WHERE status = 'queued' AND NOT EXISTS (SELECT 1 FROM runs o \
       WHERE o.status = 'queued' AND o.project = r.project \
         AND (o.priority > r.priority OR (o.priority = r.priority AND o.id < r.id))) \
     ORDER BY project";

/// Reads `sql` on a plain connection of its own, as another program would.
fn read(db: &Db, sql: &str) -> Vec<Head> {
    match db {
        Db::Sqlite(dir) => {
            let c = rusqlite::Connection::open(dir.path().join("fleet.db")).unwrap();
            let mut stmt = c.prepare(sql).unwrap();
            let rows = stmt
                .query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .unwrap();
            rows.collect::<Result<_, _>>().unwrap()
        }
        Db::Postgres(pg) => {
            let mut c = ::postgres::Client::connect(&pg.url, ::postgres::NoTls).unwrap();
            c.query(sql, &[])
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
                .collect()
        }
    }
}

/// One step of a random history. Indexes (`pick`) choose among the runs in the status the step
/// needs, modulo their number; a step with none to choose from does nothing.
#[derive(Clone, Debug)]
enum Op {
    /// `fleet enqueue` of project `p<project>`, with a priority and a delay.
    Enqueue {
        project: u8,
        priority: i64,
        delay: i64,
    },
    /// The daemon claims the head `queue_heads` gives for a project, if it has one.
    Claim { project: u8 },
    /// An active run ends failed; with a retry queued `delay` from now, or none.
    End { pick: usize, retry: Option<i64> },
    /// Recovery puts an active run back in the queue.
    Requeue { pick: usize },
    /// `fleet cancel` of a queued run.
    Cancel { pick: usize },
    /// Ended runs are forgotten.
    Prune,
    /// Another program changes a queued run's priority.
    Priority { pick: usize, priority: i64 },
    /// Another program changes a queued run's delay.
    Delay { pick: usize, not_before: i64 },
    /// Another program deletes a queued run.
    Delete { pick: usize },
    /// Another program moves a queued run to project `p<project>`.
    Move { pick: usize, project: u8 },
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u8..4, -2i64..3, 0i64..4)
            .prop_map(|(project, priority, delay)| Op::Enqueue { project, priority, delay }),
        3 => (0u8..4).prop_map(|project| Op::Claim { project }),
        2 => (any::<usize>(), proptest::option::of(0i64..4))
            .prop_map(|(pick, retry)| Op::End { pick, retry }),
        1 => any::<usize>().prop_map(|pick| Op::Requeue { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => Just(Op::Prune),
        1 => (any::<usize>(), -2i64..3).prop_map(|(pick, priority)| Op::Priority { pick, priority }),
        1 => (any::<usize>(), 0i64..4).prop_map(|(pick, not_before)| Op::Delay { pick, not_before }),
        1 => any::<usize>().prop_map(|pick| Op::Delete { pick }),
        1 => (any::<usize>(), 0u8..4).prop_map(|(pick, project)| Op::Move { pick, project }),
    ]
}

/// The instant every step and check is made at: delays 0..4 fall on both sides of it.
const NOW: Millis = 2;

/// The runs in `status`, in id order.
fn runs_in(s: &Store, status: RunStatus) -> Vec<Run> {
    let mut runs = s
        .list_runs(&RunFilter {
            status: Some(status),
            ..Default::default()
        })
        .unwrap();
    runs.sort_by_key(|r| r.id);
    runs
}

/// Chooses the run `pick` names among `runs`, if there are any.
fn chosen(runs: &[Run], pick: usize) -> Option<&Run> {
    (!runs.is_empty()).then(|| &runs[pick % runs.len()])
}

/// Applies one step.
fn step(db: &Db, s: &Store, epoch: i64, op: &Op) {
    let queued = || runs_in(s, RunStatus::Queued);
    let active = || {
        let mut runs = s.active_runs().unwrap();
        runs.sort_by_key(|r| r.id);
        runs
    };
    match *op {
        Op::Enqueue {
            project,
            priority,
            delay,
        } => {
            let mut n = new_run(&format!("p{project}"), "default");
            n.priority = priority;
            n.not_before = delay;
            s.enqueue(&n, NOW).unwrap();
        }
        Op::Claim { project } => {
            let name = format!("p{project}");
            let head = s
                .queue_heads(NOW)
                .unwrap()
                .into_iter()
                .find(|h| h.project == name);
            if let Some(h) = head {
                let req = ClaimRequest {
                    global_cap: 1000,
                    ..claim_req(h.run_id, "default")
                };
                // Refused (0 claims) while the project already has an active run.
                s.claim(epoch, &[req], NOW).unwrap();
            }
        }
        Op::End { pick, retry } => {
            if let Some(run) = chosen(&active(), pick) {
                apply(
                    s,
                    epoch,
                    run,
                    end(RunStatus::Failed, retry.map(|d| NOW + d - 2)),
                );
            }
        }
        Op::Requeue { pick } => {
            if let Some(run) = chosen(&active(), pick) {
                let reason = "never started".to_string();
                apply(s, epoch, run, Change::Requeue { reason });
            }
        }
        Op::Cancel { pick } => {
            let q = queued();
            if let Some(run) = chosen(&q, pick) {
                s.cancel_queued_runs(&[run.id], "test", NOW).unwrap();
            }
        }
        Op::Prune => {
            let ended: Vec<RunId> = s
                .list_runs(&RunFilter::default())
                .unwrap()
                .into_iter()
                .filter(|r| r.status.is_terminal())
                .map(|r| r.id)
                .collect();
            s.forget_runs(&ended).unwrap();
        }
        Op::Priority { pick, priority } => on_queued(db, s, pick, |id| {
            format!("UPDATE runs SET priority = {priority} WHERE id = {id}")
        }),
        Op::Delay { pick, not_before } => on_queued(db, s, pick, |id| {
            format!("UPDATE runs SET not_before = {not_before} WHERE id = {id}")
        }),
        Op::Delete { pick } => on_queued(db, s, pick, |id| {
            format!("DELETE FROM events WHERE run_id = {id}; DELETE FROM runs WHERE id = {id}")
        }),
        Op::Move { pick, project } => on_queued(db, s, pick, |id| {
            format!("UPDATE runs SET project = 'p{project}' WHERE id = {id}")
        }),
    }
}

/// Runs, as another program would, the SQL `sql` makes for the queued run `pick` chooses.
fn on_queued(db: &Db, s: &Store, pick: usize, sql: impl Fn(RunId) -> String) {
    if let Some(run) = chosen(&runs_in(s, RunStatus::Queued), pick) {
        let sql = sql(run.id);
        db.exec(&sql, &sql);
    }
}

/// The end of a run in `status`, with a retry queued at `retry` if given.
fn end(status: RunStatus, retry: Option<Millis>) -> Change {
    Change::Finish {
        status,
        exit_code: None,
        signal: None,
        reason: None,
        retry,
        finished_at: None,
    }
}

/// Applies `change` to the active `run`'s current claim.
fn apply(s: &Store, epoch: i64, run: &Run, change: Change) {
    let t = Transition {
        run_id: run.id,
        token: run.claim_token,
        change,
    };
    s.apply(epoch, &[t], NOW).unwrap();
}

/// `Store::queue_heads` by its definition: per project, the queued run with `not_before <= NOW`
/// of highest priority, then lowest id; in project order.
fn ready_heads(s: &Store) -> Vec<(String, RunId)> {
    let mut best: BTreeMap<String, (i64, std::cmp::Reverse<RunId>)> = BTreeMap::new();
    for r in runs_in(s, RunStatus::Queued) {
        if r.not_before > NOW {
            continue;
        }
        let key = (r.priority, std::cmp::Reverse(r.id));
        let e = best.entry(r.project.clone()).or_insert(key);
        *e = (*e).max(key);
    }
    best.into_iter().map(|(p, (_, id))| (p, id.0)).collect()
}

/// Runs `ops` and checks, after each step, the table against its definition and
/// `Store::queue_heads` against the ready heads.
fn heads_follow_every_change(
    db: &Db,
    ops: &[Op],
) -> Result<(), proptest::test_runner::TestCaseError> {
    let s = db.store();
    let epoch = take_over(&s);
    for (i, op) in ops.iter().enumerate() {
        step(db, &s, epoch, op);
        let table = read(db, TABLE);
        proptest::prop_assert_eq!(&table, &read(db, DEFINITION), "after step {} ({:?})", i, op);
        let got: Vec<(String, RunId)> = s
            .queue_heads(NOW)
            .unwrap()
            .into_iter()
            .map(|h| (h.project, h.run_id))
            .collect();
        proptest::prop_assert_eq!(got, ready_heads(&s), "after step {} ({:?})", i, op);
        let projects: Vec<String> = table.into_iter().map(|h| h.0).collect();
        proptest::prop_assert_eq!(s.queued_projects().unwrap(), projects);
    }
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// [`heads_follow_every_change`] on SQLite.
    #[test]
    fn sqlite_heads_follow_every_change(ops in proptest::collection::vec(op(), 1..50)) {
        heads_follow_every_change(&Db::sqlite(), &ops)?;
    }
}

proptest::proptest! {
    // Fewer cases: each one creates a PostgreSQL database.
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]

    /// [`heads_follow_every_change`] on PostgreSQL.
    #[test]
    fn postgres_heads_follow_every_change(ops in proptest::collection::vec(op(), 1..50)) {
        if let Some(db) = Db::postgres() {
            heads_follow_every_change(&db, &ops)?;
        }
    }
}

/// Retries `f` while the store reports busy (a lock not had in time, a deadlock broken): the
/// caller's whole transaction was rolled back and may be made again.
fn retry_busy<T>(mut f: impl FnMut() -> Result<T, StoreError>) -> T {
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if e.is_busy() => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

/// Writers of one project's queue at once, on stores of their own (several processes or
/// hosts): four threads enqueue into `p` and `q` while one claims their heads and ends them,
/// and another cancels queued runs. Under PostgreSQL's READ COMMITTED each trigger would see a
/// snapshot without the others' uncommitted changes; the heads must still equal their
/// definition once all have committed.
fn heads_stay_exact_under_concurrent_writers(db: &Db) {
    let setup = db.store();
    let epoch = take_over(&setup);
    std::thread::scope(|scope| {
        for t in 0..4i64 {
            let s = db.store_with(std::time::Duration::from_secs(10));
            scope.spawn(move || {
                for i in 0..25i64 {
                    let mut n = new_run(if (t + i) % 2 == 0 { "p" } else { "q" }, "default");
                    n.priority = (t * 7 + i * 3) % 5;
                    retry_busy(|| s.enqueue(&n, NOW));
                }
            });
        }
        let claimer = db.store_with(std::time::Duration::from_secs(10));
        scope.spawn(move || {
            for _ in 0..40 {
                let heads = retry_busy(|| claimer.queue_heads(NOW));
                let reqs: Vec<ClaimRequest> = heads
                    .iter()
                    .map(|h| ClaimRequest {
                        global_cap: 1000,
                        ..claim_req(h.run_id, "default")
                    })
                    .collect();
                let claimed = retry_busy(|| claimer.claim(epoch, &reqs, NOW));
                for c in claimed {
                    let t = Transition {
                        run_id: c.run.id,
                        token: c.run.claim_token,
                        change: Change::Requeue {
                            reason: "put back".into(),
                        },
                    };
                    // Some go back to the queue, the rest end.
                    let change = if c.run.id % 2 == 0 {
                        t
                    } else {
                        Transition {
                            change: end(RunStatus::Succeeded, None),
                            ..t
                        }
                    };
                    retry_busy(|| claimer.apply(epoch, std::slice::from_ref(&change), NOW));
                }
            }
        });
        let canceller = db.store_with(std::time::Duration::from_secs(10));
        scope.spawn(move || {
            for _ in 0..30 {
                let q = runs_in(&canceller, RunStatus::Queued);
                if let Some(run) = q.get(q.len() / 2) {
                    retry_busy(|| canceller.cancel_queued_runs(&[run.id], "test", NOW));
                }
            }
        });
    });
    assert_eq!(read(db, TABLE), read(db, DEFINITION));
}

both_backends!(heads_stay_exact_under_concurrent_writers);

/// PostgreSQL: one transaction that queues many runs of one project (a bulk enqueue by another
/// program) writes the project's head once, not once per run. Rewriting it per run left a row
/// version per run that every later rewrite in the transaction had to step over: time
/// quadratic in the size of the insert. Counted with the transaction's own write statistics
/// of `queue_heads`, so the test needs no clock; the head is still the first run.
#[test]
fn postgres_bulk_queue_writes_the_head_once() {
    let Some(db) = Db::postgres() else { return };
    drop(db.store()); // the schema
    let Db::Postgres(pg) = &db else {
        unreachable!()
    };
    let mut c = ::postgres::Client::connect(&pg.url, ::postgres::NoTls).unwrap();
    let mut tx = c.transaction().unwrap();
    tx.batch_execute(
        "INSERT INTO runs (project, namespace, status, trigger, enqueued_at) \
         SELECT 'bulk', 'default', 'queued', 'manual', 1 FROM generate_series(1, 2000)",
    )
    .unwrap();
    let writes: i64 = tx
        .query_one(
            "SELECT pg_stat_get_xact_tuples_inserted('queue_heads'::regclass) \
                  + pg_stat_get_xact_tuples_updated('queue_heads'::regclass) \
                  + pg_stat_get_xact_tuples_deleted('queue_heads'::regclass)",
            &[],
        )
        .unwrap()
        .get(0);
    tx.commit().unwrap();
    assert_eq!(writes, 1, "writes of the head while queueing 2,000 runs");
    let first: i64 = c
        .query_one("SELECT min(id) FROM runs WHERE project = 'bulk'", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        read(&db, TABLE)
            .iter()
            .map(|h| (h.0.clone(), h.1))
            .collect::<Vec<_>>(),
        vec![("bulk".to_string(), first)]
    );
    assert_eq!(read(&db, TABLE), read(&db, DEFINITION));
}
