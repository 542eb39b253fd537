//! A soak: runs keep flowing over three hosts while random daemons are SIGKILLed and restarted,
//! and the database server is restarted once with an immediate shutdown. Every run ends once,
//! as `succeeded`; the commands' markers show no cap exceeded and no run started twice; and
//! `fleet check` finds nothing wrong.

use std::collections::BTreeMap;
use std::time::Duration;

use super::harness::*;
use super::markers::*;
use crate::common::*;

const ROUNDS: usize = 10;
const PER_ROUND: usize = 15;
const CAP_X: usize = 3;
const CAP_Y: usize = 5;
const CAP_GLOBAL: usize = 6;
/// The round after which the database server is restarted.
const DB_RESTART_ROUND: usize = 4;

/// A small generator of choices (which daemon to kill); seeded from the clock and printed, so a
/// failing sequence can be told apart from another.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

#[test]
fn runs_flow_through_daemon_kills_and_a_database_restart() {
    use_private_bin();
    let Some(h) = Hosts::with_own_cluster(&["a", "b", "c"], |dir| {
        let cmd = sh(&marked(&markers_in(dir), "sleep 0.2"));
        two_namespaces(&cmd, CAP_GLOBAL, (CAP_X, 4), (CAP_Y, 6))
    }) else {
        return;
    };
    let seed = now_ns() as u64;
    eprintln!("soak seed {seed}");
    let mut rng = Lcg(seed);
    let names = h.names();
    let mut daemons: Vec<Daemon> = names.iter().map(|n| h.start(n)).collect();
    let mut ids = Vec::new();
    let mut kills: BTreeMap<&str, usize> = BTreeMap::new();
    for round in 0..ROUNDS {
        let batch: Vec<String> = (0..PER_ROUND)
            .map(|i| project_for(round * PER_ROUND + i, 4, 6))
            .collect();
        ids.extend(enqueue_from_all(&h, &batch));
        // Let some of it run, so that kills land among runs in flight.
        let ended_before = h.runs().iter().filter(|r| is_terminal(r)).count();
        let want = (ended_before + 5).min(ids.len());
        h.wait_until(DEADLINE, "five more runs to end", || {
            h.runs().iter().filter(|r| is_terminal(r)).count() >= want
        });
        let k = rng.below(names.len());
        daemons[k].kill();
        *kills.entry(names[k]).or_default() += 1;
        wait_daemon_lock_released(&h.fleet(names[k]).state_dir());
        daemons[k] = h.start(names[k]);
        if round == DB_RESTART_ROUND {
            eprintln!("restarting the database (immediate shutdown) after round {round}");
            h.restart_database();
        }
        for d in daemons.iter_mut() {
            d.assert_alive();
        }
    }
    eprintln!("SIGKILLs per host: {kills:?}");
    h.wait_until(Duration::from_secs(120), "every run to end", || {
        let runs = h.runs();
        runs.len() == ids.len() && runs.iter().all(is_terminal)
    });
    for d in daemons.iter_mut() {
        d.assert_alive();
    }

    let runs = h.runs();
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    for r in &runs {
        *by_status.entry(status_of(r).to_string()).or_default() += 1;
    }
    eprintln!("statuses {by_status:?}");
    for r in &runs {
        assert_eq!(status_of(r), "succeeded", "{r}\n{}", h.diagnostics());
        assert_eq!(r["attempt"], 1, "{r}");
    }
    // Exactly one terminal transition per run, whichever host or epoch wrote it.
    let mut sql = h.sql();
    let ends: BTreeMap<i64, i64> = sql
        .query(
            "SELECT run_id, count(*) FROM events \
             WHERE to_status IN ('succeeded','failed','timed_out','cancelled','lost') \
             GROUP BY run_id",
            &[],
        )
        .expect("read the events")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    for id in &ids {
        assert_eq!(
            ends.get(id),
            Some(&1),
            "terminal events of run {id}: {ends:?}"
        );
    }

    let markers = read_markers(&h.markers());
    let intervals = intervals(&markers).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(intervals.len(), ids.len(), "one command per run");
    assert!(
        intervals.iter().all(|i| i.to.is_some()),
        "every command ended: {intervals:?}"
    );
    let peaks = peaks(&intervals);
    eprintln!("peaks {peaks:?}");
    let limits = Limits {
        global: CAP_GLOBAL,
        namespaces: &[("x", CAP_X), ("y", CAP_Y)],
        hosts: &[],
    };
    if let Err(e) = peaks.check(&limits) {
        panic!("{e}");
    }
    h.assert_check_ok("a");
}
