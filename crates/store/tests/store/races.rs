//! Writers on several stores at once (several processes, or hosts, sharing one database) doing
//! the same thing: one run's end applied by all of them is applied once (one retry, one event,
//! its seats freed once), and one schedule occurrence fired by all of them makes one run.

use std::sync::Barrier;

use store::*;

use crate::common;
use crate::common::Db;

/// How many stores race.
const RACERS: usize = 6;

/// Every racer applies the same end of one run (a failure asking for a retry): exactly one
/// applies it, the others are told it is already done; one retry is queued, one end event
/// written. Goes red on PostgreSQL if the run is not locked before its check (two writers both
/// see it running and both end it, queueing two retries).
fn one_end_applied_by_several_stores_is_applied_once(db: &Db) {
    let s = db.store();
    let epoch = s.take_over("local", 1, "fleet.toml", "{}", 0).unwrap();
    let new = NewRun {
        project: "p".into(),
        namespace: "default".into(),
        ..Default::default()
    };
    let id = s.enqueue(&new, 1).unwrap();
    let ask = ClaimRequest {
        run_id: id,
        namespace: "default".into(),
        global_cap: 1,
        namespace_cap: Some(1),
        max_parallel: 1,
        host_cap: None,
        config_version: None,
    };
    let run = s.claim(epoch, &[ask], 2).unwrap().remove(0).run;
    let end = Transition {
        run_id: id,
        token: run.claim_token,
        change: Change::Finish {
            status: RunStatus::Failed,
            exit_code: Some(1),
            signal: None,
            reason: None,
            retry: Some(0),
            finished_at: None,
        },
    };
    let start = Barrier::new(RACERS);
    let results: Vec<Applied> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..RACERS)
            .map(|_| {
                let store = db.store();
                let (start, end) = (&start, &end);
                scope.spawn(move || {
                    start.wait();
                    loop {
                        match store.apply(epoch, std::slice::from_ref(end), 3) {
                            Ok(mut a) => return a.remove(0),
                            Err(e) if e.is_busy() => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let done = results
        .iter()
        .filter(|a| matches!(a, Applied::Done { .. }))
        .count();
    assert_eq!(done, 1, "{results:?}");
    let retries = s
        .list_runs(&RunFilter {
            status: Some(RunStatus::Queued),
            ..RunFilter::default()
        })
        .unwrap();
    assert_eq!(retries.len(), 1, "one retry: {retries:?}");
    let ends = s
        .events_after(0)
        .unwrap()
        .into_iter()
        .filter(|e| e.run_id == id && e.to == RunStatus::Failed)
        .count();
    assert_eq!(ends, 1);
    // Its seat was freed (once): the retry can take it.
    let again = ClaimRequest {
        run_id: retries[0].id,
        namespace: "default".into(),
        global_cap: 1,
        namespace_cap: Some(1),
        max_parallel: 1,
        host_cap: None,
        config_version: None,
    };
    assert_eq!(s.claim(epoch, &[again], 4).unwrap().len(), 1);
}

/// Every racer fires the same first occurrence of one schedule: one run is made, one racer
/// writes, the others find the cursor moved. Goes red on PostgreSQL without the per-project
/// lock of a schedule step (the second insert of the occurrence's run fails on the unique key).
fn one_occurrence_fired_by_several_stores_makes_one_run(db: &Db) {
    let s = db.store();
    let epoch = s.take_over("local", 1, "fleet.toml", "{}", 0).unwrap();
    let req = common::req(None, Some(60_000), OverlapPolicy::Queue);
    let start = Barrier::new(RACERS);
    let fired: Vec<Fired> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..RACERS)
            .map(|_| {
                let store = db.store();
                let (start, req) = (&start, &req);
                scope.spawn(move || {
                    start.wait();
                    loop {
                        match store.fire_schedule(epoch, req, 1) {
                            Ok(f) => return f,
                            Err(e) if e.is_busy() => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(fired.iter().filter(|f| f.written).count(), 1, "{fired:?}");
    assert_eq!(fired.iter().filter(|f| f.queued.is_some()).count(), 1);
    let runs = s.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(s.schedules().unwrap()[0].cursor, 60_000);
}

both_backends!(
    one_end_applied_by_several_stores_is_applied_once,
    one_occurrence_fired_by_several_stores_makes_one_run,
);
