//! Many hosts on one database: per-host epochs, host capacity as seats under concurrent claims,
//! forgetting a host, the published config and stale claims, a lowered cap, log tails. Every
//! test runs on both backends; on SQLite (one state directory is one host) the hosts of a test
//! are one host's several pools where the test needs them writing at once.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use store::*;

use crate::common;
use crate::common::{claim_req, new_run, succeeded, Db};

fn take(s: &Store, host: &str) -> i64 {
    s.take_over(host, 1, "fleet.toml", "{}", now_ms()).unwrap()
}

fn finish(s: &Store, epoch: i64, run: &Run) -> Result<Vec<Applied>, StoreError> {
    s.apply(epoch, &[succeeded(run)], now_ms())
}

/// Two hosts of different names both write; a second daemon of the same host fences the first
/// (not forgotten: it must stop).
fn hosts_fence_only_their_own_name(db: &Db) {
    let a = db.store();
    let b = db.store();
    let ea = take(&a, "a");
    let eb = take(&b, "b");
    let info = HostInfo::default();
    if db.is_postgres() {
        a.heartbeat(ea, &info, 1).unwrap();
    }
    b.heartbeat(eb, &info, 1).unwrap();
    let eb2 = take(&b, "b");
    match b.heartbeat(eb, &info, 2) {
        Err(StoreError::Fenced {
            forgotten: false, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    b.heartbeat(eb2, &info, 3).unwrap();
    let names: Vec<String> = a.hosts().unwrap().into_iter().map(|h| h.name).collect();
    assert_eq!(names, ["a", "b"]);
}

/// Three pools claim and end runs at once, each with a host capacity of 2 under a global cap of
/// 5: every snapshot of the active runs shows no host over 2 and no more than 5 in all, and
/// every run is claimed exactly once.
fn host_caps_hold_under_concurrent_claims(db: &Db) {
    const RUNS: i64 = 60;
    let setup = db.store();
    for i in 0..RUNS {
        setup
            .enqueue(&new_run(&format!("p{}", i % 12), "default"), i)
            .unwrap();
    }
    // On SQLite one host (three pools); on PostgreSQL three hosts.
    let names: [&str; 3] = if db.is_postgres() {
        ["a", "b", "c"]
    } else {
        ["a", "a", "a"]
    };
    let mut epochs = BTreeMap::new();
    let stores: Vec<(Store, String)> = names
        .iter()
        .map(|n| {
            let s = db.store();
            epochs.entry(n.to_string()).or_insert_with(|| take(&s, n));
            (s, n.to_string())
        })
        .collect();
    let claimed = Arc::new(Mutex::new(Vec::<RunId>::new()));
    let threads: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(t, (s, host))| {
            let epoch = epochs[&host];
            let claimed = claimed.clone();
            std::thread::spawn(move || {
                let mut ended = 0;
                loop {
                    let heads = match s.queue_heads(RUNS + 1) {
                        Ok(h) => h,
                        Err(e) if e.is_busy() => continue,
                        Err(e) => panic!("{e}"),
                    };
                    if heads.is_empty() {
                        return ended;
                    }
                    let asks: Vec<ClaimRequest> = heads
                        .iter()
                        .cycle()
                        .skip(t % heads.len())
                        .take(3.min(heads.len()))
                        .map(|h| ClaimRequest {
                            global_cap: 5,
                            host_cap: Some(2),
                            ..claim_req(h.run_id, "default")
                        })
                        .collect();
                    let got = match s.claim(epoch, &asks, RUNS + 1) {
                        Ok(c) => c,
                        Err(e) if e.is_busy() => continue,
                        Err(e) => panic!("{e}"),
                    };
                    let active = s.active_runs().unwrap();
                    let mut per_host: BTreeMap<Option<String>, usize> = BTreeMap::new();
                    for r in &active {
                        *per_host.entry(r.host.clone()).or_default() += 1;
                    }
                    assert!(active.len() <= 5, "{} active", active.len());
                    assert!(per_host.values().all(|&n| n <= 2), "{per_host:?}");
                    for c in &got {
                        assert_eq!(c.run.host.as_deref(), Some(host.as_str()));
                        claimed.lock().unwrap().push(c.run.id);
                        while let Err(e) = finish(&s, epoch, &c.run) {
                            assert!(e.is_busy(), "{e}");
                        }
                        ended += 1;
                    }
                }
            })
        })
        .collect();
    let ended: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let claimed = claimed.lock().unwrap();
    let distinct: HashSet<_> = claimed.iter().collect();
    assert_eq!(distinct.len(), claimed.len(), "a run claimed twice");
    assert_eq!(ended as i64, RUNS);
}

/// Forgetting a host, in one transaction: its runs end lost (one retried per the plan), their
/// seats are freed once (the cap has room again), and a late write from the forgotten epoch is
/// refused as forgotten; an unknown host is refused by name.
fn forget_takes_a_hosts_runs_once(db: &Db) {
    let a = db.store();
    let ea = take(&a, "a");
    let r1 = a.enqueue(&new_run("p", "default"), 1).unwrap();
    let r2 = a.enqueue(&new_run("q", "default"), 1).unwrap();
    let cap2 = |id| ClaimRequest {
        global_cap: 2,
        ..claim_req(id, "default")
    };
    let got = a.claim(ea, &[cap2(r1), cap2(r2)], 2).unwrap();
    assert_eq!(got.len(), 2);
    let gone = a
        .forget_host(
            "a",
            "operator",
            &|r: &Run| (r.id == r1).then_some(0),
            &FailureHooks::new(),
            3,
        )
        .unwrap();
    assert_eq!(gone.lost, [r1, r2]);
    assert_eq!(gone.retried.len(), 1);
    assert_eq!(a.get_run(r1).unwrap().status, RunStatus::Lost);
    assert!(a.active_runs().unwrap().is_empty());
    // The late end from the forgotten daemon: refused, nothing written over the lost run.
    match finish(&a, ea, &got[0].run) {
        Err(StoreError::Fenced {
            forgotten: true, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(a.get_run(r1).unwrap().status, RunStatus::Lost);
    assert_eq!(a.hosts().unwrap()[0].state(4), HostState::Forgotten);
    // The host rejoins under a new epoch; the freed seats are all there (cap 2, two claims).
    let again = take(&a, "a");
    let r3 = a.enqueue(&new_run("r", "default"), 4).unwrap();
    let both = a
        .claim(again, &[cap2(gone.retried[0]), cap2(r3)], 5)
        .unwrap();
    assert_eq!(both.len(), 2, "seats not freed");
    assert!(matches!(
        a.forget_host("nope", "x", &|_| None, &FailureHooks::new(), 6),
        Err(StoreError::UnknownHost(n)) if n == "nope"
    ));
}

/// A second forget of a host already forgotten is refused as such and writes nothing: the
/// epoch and who forgot it stay the first forget's. A host back since can be forgotten again.
fn forgetting_a_forgotten_host_writes_nothing(db: &Db) {
    let a = db.store();
    take(&a, "a");
    a.forget_host("a", "first", &|_| None, &FailureHooks::new(), 3)
        .unwrap();
    let before = a.hosts().unwrap()[0].clone();
    match a.forget_host("a", "second", &|_| None, &FailureHooks::new(), 4) {
        Err(StoreError::AlreadyForgotten { host, at, by }) => {
            assert_eq!((host.as_str(), at, by.as_str()), ("a", 3, "first"));
        }
        other => panic!("{other:?}"),
    }
    let after = a.hosts().unwrap()[0].clone();
    assert_eq!(
        (after.epoch, after.forgotten_at, after.forgotten_by),
        (before.epoch, before.forgotten_at, before.forgotten_by)
    );
    take(&a, "a");
    a.forget_host("a", "again", &|_| None, &FailureHooks::new(), 5)
        .unwrap();
}

/// A claim packed with an older published version claims nothing; publishing the same text
/// again changes no version.
fn a_claim_of_a_stale_config_claims_nothing(db: &Db) {
    let a = db.store();
    let ea = take(&a, "a");
    let v1 = a.publish_config(ea, "x = 1", "d1", 1).unwrap();
    assert_eq!(v1, 1);
    assert_eq!(a.publish_config(ea, "x = 1", "d1", 2).unwrap(), 1);
    let id = a.enqueue(&new_run("p", "default"), 1).unwrap();
    let v2 = a.publish_config(ea, "x = 2", "d2", 3).unwrap();
    assert_eq!(v2, 2);
    let stale = ClaimRequest {
        config_version: Some(v1),
        ..claim_req(id, "default")
    };
    match a.claim(ea, std::slice::from_ref(&stale), 4) {
        Err(StoreError::StaleConfig {
            ours: 1,
            published: 2,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(a.get_run(id).unwrap().status, RunStatus::Queued);
    let fresh = ClaimRequest {
        config_version: Some(v2),
        ..stale
    };
    assert_eq!(a.claim(ea, &[fresh], 5).unwrap().len(), 1);
    let p = a.published_config().unwrap().unwrap();
    assert_eq!(
        (p.version, p.text.as_str(), p.published_by.as_str()),
        (2, "x = 2", "a")
    );
}

/// A cap lowered from 3 to 2 while a run holds seat 2: no more than 2 ever become active, even
/// when another claim is in flight. On PostgreSQL the other claim is a transaction holding seat
/// 1 uncommitted; without the lowered-cap rule the claim would take seat 0 and three runs would
/// hold seats of a cap of 2.
fn a_lowered_cap_is_never_exceeded(db: &Db) {
    let a = db.store();
    let ea = take(&a, "a");
    let ids: Vec<RunId> = (0..5)
        .map(|i| a.enqueue(&new_run(&format!("p{i}"), "ns"), i).unwrap())
        .collect();
    let with_cap = |id, cap| ClaimRequest {
        namespace_cap: Some(cap),
        global_cap: 10,
        ..claim_req(id, "ns")
    };
    let three = a
        .claim(
            ea,
            &[
                with_cap(ids[0], 3),
                with_cap(ids[1], 3),
                with_cap(ids[2], 3),
            ],
            10,
        )
        .unwrap();
    assert_eq!(three.len(), 3);
    finish(&a, ea, &three[0].run).unwrap();
    finish(&a, ea, &three[1].run).unwrap();
    // One run active (seat 2 on PostgreSQL). Another claimer is mid-claim:
    let other = db.is_postgres().then(|| {
        let common::Db::Postgres(pg) = db else { unreachable!() };
        let mut c = ::postgres::Client::connect(&pg.url, ::postgres::NoTls).unwrap();
        c.batch_execute(
            "BEGIN; UPDATE cap_seats SET run_id = 999999 WHERE kind = 'namespace' AND name = 'ns' AND seat = 1",
        )
        .unwrap();
        c
    });
    let got = a.claim(ea, &[with_cap(ids[3], 2)], 11).unwrap();
    if let Some(mut c) = other {
        c.batch_execute("COMMIT").unwrap();
        // Seats held now: seat 2 (the old run), seat 1 (the other claim), and any seat this
        // claim took.
        assert!(got.is_empty(), "a lowered cap exceeded: {got:?}");
    } else {
        assert_eq!(got.len(), 1);
        assert!(a.claim(ea, &[with_cap(ids[4], 2)], 12).unwrap().is_empty());
    }
}

/// A log tail is kept for an ended run, read back, and pruned with its run; a forgotten
/// daemon stores none.
fn log_tails_are_kept_and_pruned(db: &Db) {
    let a = db.store();
    let ea = take(&a, "a");
    let id = a.enqueue(&new_run("p", "default"), 1).unwrap();
    let run = a.claim(ea, &[claim_req(id, "default")], 2).unwrap()[0]
        .run
        .clone();
    finish(&a, ea, &run).unwrap();
    a.store_log_tail(ea, id, b"the end\n", true).unwrap();
    let t = a.log_tail(id).unwrap().unwrap();
    assert_eq!(
        (t.host.as_str(), t.tail.as_slice(), t.cut),
        ("a", &b"the end\n"[..], true)
    );
    // The newest run of a project is kept by any prune; a second run lets the first go.
    let id2 = a.enqueue(&new_run("p", "default"), 3).unwrap();
    let run2 = a.claim(ea, &[claim_req(id2, "default")], 4).unwrap()[0]
        .run
        .clone();
    finish(&a, ea, &run2).unwrap();
    assert_eq!(a.forget_runs(&[id]).unwrap(), 1);
    assert!(a.log_tail(id).unwrap().is_none());
    a.forget_host("a", "op", &|_| None, &FailureHooks::new(), 5)
        .unwrap();
    assert!(matches!(
        a.store_log_tail(ea, id2, b"x", false),
        Err(StoreError::Fenced {
            forgotten: true,
            ..
        })
    ));
}

/// `fleet check`'s seat reading: nothing after a claim and an end; on PostgreSQL a seat left
/// held by an ended run (freed never) is reported with the run.
fn seats_out_of_step_with_runs_are_reported(db: &Db) {
    let a = db.store();
    let ea = take(&a, "a");
    let id = a.enqueue(&new_run("p", "default"), 1).unwrap();
    let run = a.claim(ea, &[claim_req(id, "default")], 2).unwrap()[0]
        .run
        .clone();
    assert!(a.seat_problems().unwrap().is_empty());
    finish(&a, ea, &run).unwrap();
    assert!(a.seat_problems().unwrap().is_empty());
    if db.is_postgres() {
        db.exec(
            "",
            &format!("UPDATE cap_seats SET run_id = {id} WHERE kind = 'global' AND seat = 0"),
        );
        let found = a.seat_problems().unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, id);
        assert!(found[0].1.contains("succeeded"), "{found:?}");
    }
}

/// Daemons of two places taking a host name nobody holds yet, at the same instant, again and
/// again: each time exactly one takes it, and the other is refused as from another place (on
/// SQLite, where one state directory is one host and no place is recorded, both may take it
/// in turn).
fn a_new_name_is_taken_by_one_place_only(db: &Db) {
    if !db.is_postgres() {
        return;
    }
    for round in 0..12 {
        let name = format!("race-{round}");
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let outcomes: Vec<Result<i64, StoreError>> = (0..2)
            .map(|i| {
                let (s, barrier, name) = (db.store(), barrier.clone(), name.clone());
                std::thread::spawn(move || {
                    let place = Place {
                        machine: "m".into(),
                        state_dir_id: format!("dir-{i}"),
                    };
                    barrier.wait();
                    s.take_over_from(&name, Some(&place), 1, "fleet.toml", "{}", now_ms())
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let taken = outcomes.iter().filter(|o| o.is_ok()).count();
        let refused = outcomes
            .iter()
            .filter(|o| matches!(o, Err(StoreError::HostAlive { .. })))
            .count();
        assert_eq!((taken, refused), (1, 1), "round {round}: {outcomes:?}");
    }
}

both_backends!(
    a_new_name_is_taken_by_one_place_only,
    seats_out_of_step_with_runs_are_reported,
    hosts_fence_only_their_own_name,
    host_caps_hold_under_concurrent_claims,
    forget_takes_a_hosts_runs_once,
    forgetting_a_forgotten_host_writes_nothing,
    a_claim_of_a_stale_config_claims_nothing,
    a_lowered_cap_is_never_exceeded,
    log_tails_are_kept_and_pruned,
);
