//! Claims from several stores at once (several processes, or hosts, sharing one database), and
//! the caps a claim keeps: every run handed out once, no cap exceeded, a cap's place freed by
//! the end of the run that held it.

use store::*;

use crate::common::{claim_req as req, new_run, take_over, Db};

/// Several stores on one database (several processes, or hosts, each with its own pool) race to
/// claim the same runs: exactly one wins each run.
fn concurrent_claims_hand_each_run_out_once(db: &Db) {
    let s = db.store();
    let epoch = take_over(&s);
    let ids: Vec<RunId> = (0..50)
        .map(|i| s.enqueue(&new_run(&format!("p{i}"), "default"), i).unwrap())
        .collect();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let s = db.store();
            let ids = ids.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                for id in ids {
                    let wide = ClaimRequest {
                        global_cap: 1_000,
                        ..req(id, "default")
                    };
                    loop {
                        match s.claim(epoch, std::slice::from_ref(&wide), 10) {
                            Ok(c) => {
                                got.extend(c.into_iter().map(|c| c.run.id));
                                break;
                            }
                            Err(e) if e.is_busy() => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                got
            })
        })
        .collect();
    let mut all: Vec<RunId> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort();
    assert_eq!(all, ids, "every run claimed exactly once");
}

/// What [`concurrent_claims_never_exceed_a_cap`] saw: the active runs per namespace and in all,
/// as the claimers count them, and the most ever seen.
#[derive(Default)]
struct Seen {
    global: u32,
    namespaces: std::collections::BTreeMap<String, u32>,
    max_global: u32,
    max_namespaces: std::collections::BTreeMap<String, u32>,
    claimed: Vec<RunId>,
}

/// Eight stores on one database claim and end runs as fast as they can, each asking for any
/// queued run, with caps (global 3; namespace `a` 2, `b` 1). The database alone keeps the caps:
/// nothing here or in a packer holds claims back. Each claimer counts a run active from its
/// claim's commit until just before its end is written, so the count never exceeds what the
/// database holds active: a count above a cap is a cap the database let be exceeded. Every run
/// is handed out exactly once, and every run ends.
fn concurrent_claims_never_exceed_a_cap(db: &Db) {
    const RUNS: i64 = 240;
    let caps = |ns: &str| if ns == "a" { 2 } else { 1 };
    let s = db.store();
    let epoch = take_over(&s);
    let mut ids: Vec<RunId> = (0..RUNS)
        .map(|i| {
            let ns = if i % 2 == 0 { "a" } else { "b" };
            s.enqueue(&new_run(&format!("p{i}"), ns), i).unwrap()
        })
        .collect();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let s = db.store();
            let seen = seen.clone();
            std::thread::spawn(move || loop {
                let heads = match s.queue_heads(RUNS) {
                    Ok(h) => h,
                    Err(e) if e.is_busy() => continue,
                    Err(e) => panic!("{e}"),
                };
                if heads.is_empty() {
                    return;
                }
                // Different claimers start at different heads, and ask for two at once.
                let asks: Vec<ClaimRequest> = heads
                    .iter()
                    .cycle()
                    .skip(t % heads.len())
                    .take(2.min(heads.len()))
                    .map(|h| ClaimRequest {
                        run_id: h.run_id,
                        namespace: h.namespace.clone(),
                        global_cap: 3,
                        namespace_cap: Some(caps(&h.namespace)),
                        max_parallel: 1,
                        host_cap: None,
                        config_version: None,
                    })
                    .collect();
                let claimed = match s.claim(epoch, &asks, RUNS) {
                    Ok(c) => c,
                    Err(e) if e.is_busy() => continue,
                    Err(e) => panic!("{e}"),
                };
                {
                    let mut seen = seen.lock().unwrap();
                    for c in &claimed {
                        seen.claimed.push(c.run.id);
                        seen.global += 1;
                        let n = seen.namespaces.entry(c.run.namespace.clone()).or_default();
                        *n += 1;
                        let n = *n;
                        seen.max_global = seen.max_global.max(seen.global);
                        let m = seen
                            .max_namespaces
                            .entry(c.run.namespace.clone())
                            .or_default();
                        *m = (*m).max(n);
                    }
                }
                for c in claimed {
                    {
                        let mut seen = seen.lock().unwrap();
                        seen.global -= 1;
                        *seen.namespaces.get_mut(&c.run.namespace).unwrap() -= 1;
                    }
                    let end = Transition {
                        run_id: c.run.id,
                        token: c.run.claim_token,
                        change: Change::Finish {
                            status: RunStatus::Succeeded,
                            exit_code: Some(0),
                            signal: None,
                            reason: None,
                            retry: None,
                            finished_at: None,
                        },
                    };
                    loop {
                        match s.apply(epoch, std::slice::from_ref(&end), RUNS) {
                            Ok(_) => break,
                            Err(e) if e.is_busy() => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let seen = seen.lock().unwrap();
    assert!(
        seen.max_global <= 3,
        "global cap 3 exceeded: {}",
        seen.max_global
    );
    for (ns, max) in &seen.max_namespaces {
        assert!(
            *max <= caps(ns),
            "namespace {ns} cap {} exceeded: {max}",
            caps(ns)
        );
    }
    let mut claimed = seen.claimed.clone();
    claimed.sort();
    ids.sort();
    assert_eq!(claimed, ids, "every run handed out exactly once");
    let done = s
        .list_runs(&RunFilter {
            status: Some(RunStatus::Succeeded),
            ..RunFilter::default()
        })
        .unwrap();
    assert_eq!(done.len() as i64, RUNS, "every run ended");
    assert!(s.active_runs().unwrap().is_empty());
}

/// A claim whose cap is full is left out and its run stays queued; once a run ends, its place
/// is free again (on PostgreSQL: its seats are freed with its end, exactly once).
fn a_full_cap_refuses_the_claim_until_a_run_ends(db: &Db) {
    let s = db.store();
    let epoch = take_over(&s);
    let capped = |id| ClaimRequest {
        run_id: id,
        namespace: "n".into(),
        global_cap: 10,
        namespace_cap: Some(2),
        max_parallel: 1,
        host_cap: None,
        config_version: None,
    };
    let ids: Vec<RunId> = (0..3)
        .map(|i| s.enqueue(&new_run(&format!("p{i}"), "n"), i).unwrap())
        .collect();
    let all: Vec<ClaimRequest> = ids.iter().map(|&id| capped(id)).collect();
    let first = s.claim(epoch, &all, 5).unwrap();
    assert_eq!(first.len(), 2, "namespace cap 2: {first:?}");
    assert_eq!(s.get_run(ids[2]).unwrap().status, RunStatus::Queued);
    assert!(s.claim(epoch, &[capped(ids[2])], 6).unwrap().is_empty());
    // The global cap binds the same way.
    let other = s.enqueue(&new_run("q", "m"), 7).unwrap();
    let tight = ClaimRequest {
        run_id: other,
        namespace: "m".into(),
        global_cap: 2,
        namespace_cap: None,
        max_parallel: 1,
        host_cap: None,
        config_version: None,
    };
    assert!(s
        .claim(epoch, std::slice::from_ref(&tight), 8)
        .unwrap()
        .is_empty());
    // One run ends; a requeue (never started) frees its place too. Applying the end again
    // changes nothing: the place is not freed twice.
    let end = Transition {
        run_id: first[0].run.id,
        token: first[0].run.claim_token,
        change: Change::Finish {
            status: RunStatus::Failed,
            exit_code: Some(1),
            signal: None,
            reason: None,
            retry: None,
            finished_at: None,
        },
    };
    s.apply(epoch, std::slice::from_ref(&end), 9).unwrap();
    assert!(matches!(
        s.apply(epoch, std::slice::from_ref(&end), 10).unwrap()[0],
        Applied::Skipped(_)
    ));
    let third = s.claim(epoch, &[capped(ids[2])], 11).unwrap();
    assert_eq!(third.len(), 1);
    // Two active in `n` again: the cap is full, and stays full after the repeated end.
    let late = s.enqueue(&new_run("r", "n"), 12).unwrap();
    assert!(s.claim(epoch, &[capped(late)], 13).unwrap().is_empty());
    s.apply(
        epoch,
        &[Transition {
            run_id: third[0].run.id,
            token: third[0].run.claim_token,
            change: Change::Requeue {
                reason: "never started".into(),
            },
        }],
        14,
    )
    .unwrap();
    assert_eq!(s.claim(epoch, &[capped(late)], 15).unwrap().len(), 1);
}

both_backends!(
    concurrent_claims_hand_each_run_out_once,
    concurrent_claims_never_exceed_a_cap,
    a_full_cap_refuses_the_claim_until_a_run_ends,
);
