//! Soak: the daemon is SIGKILLed again and again at random instants while runs flow through two
//! capped namespaces and the default one, with failures and retries; then a last daemon drains
//! everything and the whole history is checked against the restart rules: at most one start per
//! attempt, every cap held, every run ended exactly once and as its command decided.
//!
//! Knobs (environment):
//! - `FLEET_SOAK_KILLS`: how many daemons are SIGKILLed (default 30: about 20 s on a 2-core VM).
//!   The long setting is `FLEET_SOAK_KILLS=1000` (about 10 minutes; 200 took 110 s).
//! - `FLEET_SOAK_RUNS`: how many runs are enqueued by hand (default: 160, or 16 per 3 kills when
//!   that is more). A quarter is queued before the first daemon, the rest in batches while the
//!   daemons come and go. Sized so that most SIGKILLs land while runs are in flight (with 80 the
//!   queue drained after a third of the kills); the soak prints how many runs each kill hit.
//! - `FLEET_SOAK_SEED`: replays one soak exactly (same projects per run, same delays before each
//!   SIGKILL, same enqueue points). The seed is printed at the start of every soak.
//!
//!   FLEET_SOAK_KILLS=1000 FLEET_SOAK_SEED=1234 cargo test --all-features --test e2e restart::soak:: -- --nocapture
//!
//! Only the daemon is ever killed: shims and commands live in their own sessions and survive it,
//! so every run must end `succeeded` or `failed` exactly as its command decided — a `lost` run
//! means a shim died, which nothing in this scenario does, so it fails the soak.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

const GLOBAL_CAP: usize = 4;
const CAP_A: usize = 2;
const CAP_B: usize = 3;

/// What a project's command does with its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Exits 0.
    Ok,
    /// Exits 3 on attempt 1, 0 on the retry.
    FailOnce,
    /// Always exits 3.
    FailAlways,
}

/// (project, namespace or None for default, sleep, kind). Every project has `retries = 1`.
const PROJECTS: &[(&str, Option<&str>, &str, Kind)] = &[
    ("a0", Some("a"), "0.1", Kind::Ok),
    ("a1", Some("a"), "0.25", Kind::Ok),
    ("a2", Some("a"), "0.05", Kind::FailOnce),
    ("b0", Some("b"), "0", Kind::Ok),
    ("b1", Some("b"), "0.3", Kind::Ok),
    ("b2", Some("b"), "0.15", Kind::FailAlways),
    ("d0", None, "0.2", Kind::Ok),
    ("d1", None, "0.1", Kind::FailOnce),
];

const FAIL_CODE: i64 = 3;

/// xorshift64*: deterministic, seeded, good enough to pick delays and projects.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform-ish in lo..=hi.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
    })
}

fn config(dir: &Path) -> String {
    let rec = dir.join("records");
    let mut t = format!(
        "max_concurrency = {GLOBAL_CAP}\n\
         [namespaces.a]\nmax_concurrency = {CAP_A}\n\
         [namespaces.b]\nmax_concurrency = {CAP_B}\n"
    );
    for (name, ns, sleep, kind) in PROJECTS {
        let base = recorder_script(&rec, sleep);
        let script = match kind {
            Kind::Ok => base,
            Kind::FailOnce => format!("{base}; [ \"$FLEET_ATTEMPT\" -ge 2 ] || exit {FAIL_CODE}"),
            Kind::FailAlways => format!("{base}; exit {FAIL_CODE}"),
        };
        t += &format!(
            "[projects.{name}]\ncommand = {}\nretries = 1\nretry_backoff = \"200ms\"\n",
            sh(&script)
        );
        if let Some(ns) = ns {
            t += &format!("namespace = \"{ns}\"\n");
        }
    }
    t
}

/// Number of terminal events per run, straight from the database's append-only events table.
fn terminal_events(f: &Fleet) -> BTreeMap<i64, usize> {
    let db = f.db();
    let mut st = db
        .prepare(
            "SELECT run_id, COUNT(*) FROM events WHERE to_status IN \
             ('succeeded','failed','timed_out','cancelled','lost') GROUP BY run_id",
        )
        .unwrap();
    st.query_map([], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)? as usize))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// For each instant (ms since the epoch), how many runs the database held active (claimed and
/// not yet requeued or ended), from the events table. A statistic: it shows the kills landed
/// while work was in flight.
fn active_at(f: &Fleet, instants: &[i64]) -> Vec<usize> {
    let db = f.db();
    let mut st = db
        .prepare("SELECT run_id, at, to_status FROM events ORDER BY seq")
        .unwrap();
    let events: Vec<(i64, i64, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut open: BTreeMap<i64, i64> = BTreeMap::new();
    let mut intervals = Vec::new();
    for (run, at, to) in events {
        match to.as_str() {
            "starting" => {
                open.insert(run, at);
            }
            "running" => {}
            _ => {
                if let Some(from) = open.remove(&run) {
                    intervals.push((from, at));
                }
            }
        }
    }
    intervals.extend(open.values().map(|&from| (from, i64::MAX)));
    instants
        .iter()
        .map(|&t| intervals.iter().filter(|&&(a, b)| a <= t && t < b).count())
        .collect()
}

#[test]
fn random_sigkill_soak() {
    use_private_bin();
    let kills = env_u64("FLEET_SOAK_KILLS").unwrap_or(30) as usize;
    let total = env_u64("FLEET_SOAK_RUNS")
        .map(|n| n as usize)
        .unwrap_or_else(|| 160.max(kills * 16 / 3));
    let seed = env_u64("FLEET_SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            ^ u64::from(std::process::id())
    });
    eprintln!(
        "soak: FLEET_SOAK_SEED={seed} FLEET_SOAK_KILLS={kills} FLEET_SOAK_RUNS={total} (set them to replay)"
    );
    let mut rng = Rng::new(seed);
    let began = Instant::now();

    let f = Fleet::with(config);
    let rec = f.file("records");
    std::fs::write(&rec, "").unwrap();

    // Which project each hand-enqueued run is for, decided up front from the seed.
    let plan: Vec<usize> = (0..total)
        .map(|_| rng.range(0, PROJECTS.len() as u64 - 1) as usize)
        .collect();
    let mut manual: BTreeMap<i64, usize> = BTreeMap::new();
    let enqueue = |manual: &mut BTreeMap<i64, usize>, i: usize| {
        let id = f.enqueue(PROJECTS[plan[i]].0);
        manual.insert(id, plan[i]);
    };
    let before = total / 4;
    for i in 0..before {
        enqueue(&mut manual, i);
    }
    // The other three quarters are enqueued while daemons come and go: batch k right after daemon k is up.
    let during = total - before;
    let batch =
        |k: usize| (before + k * during / kills.max(1))..(before + (k + 1) * during / kills.max(1));

    let mut delays = Vec::with_capacity(kills);
    let mut kill_times = Vec::with_capacity(kills);
    for k in 0..kills {
        let mut d = f.start_daemon();
        let delay = Duration::from_millis(rng.range(50, 700));
        delays.push(delay);
        for i in batch(k) {
            enqueue(&mut manual, i);
        }
        // The scenario, not synchronisation: let this daemon work a random while, then crash it.
        std::thread::sleep(delay);
        d.assert_alive();
        d.kill();
        kill_times.push(now_ms());
        // A shim half-spawned at the kill may hold the daemon lock for a moment: a product bug
        // with its own test (tests/e2e/failpoints, restart_right_after_a_crash_is_never_refused).
        wait_daemon_lock_released(&f.state_dir());
    }
    for i in manual.len()..total {
        enqueue(&mut manual, i);
    }
    let kill_phase = began.elapsed();

    let mut d = f.start_daemon();
    let drain = Duration::from_secs(120 + total as u64);
    f.wait_until(drain, "every run to end (none queued or active)", || {
        let runs = f.runs();
        !runs.is_empty() && runs.iter().all(is_terminal)
    });
    d.assert_alive();
    let runs = f.runs();
    let elapsed = began.elapsed();

    // ---- statistics (printed before any assertion, so a failure shows them) ----
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    for r in &runs {
        *by_status
            .entry(r["status"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    let retries = runs.iter().filter(|r| r["trigger"] == "retry").count();
    let records = read_records(&rec);
    let check = f.cmd(&["check"]);
    let check_json = f.cmd(&["check", "--json"]);
    let lost: Vec<&Value> = runs.iter().filter(|r| r["status"] == "lost").collect();
    let mean_delay =
        delays.iter().map(|d| d.as_millis()).sum::<u128>() / delays.len().max(1) as u128;
    eprintln!(
        "soak stats: seed {seed}; {kills} daemons SIGKILLed (mean delay {mean_delay} ms) in {:.1}s, \
         total {:.1}s; {} runs ({} by hand, {retries} retries); statuses {by_status:?}; \
         {} lost; {} record lines; check: {}",
        kill_phase.as_secs_f64(),
        elapsed.as_secs_f64(),
        runs.len(),
        manual.len(),
        lost.len(),
        records.len(),
        check_json.stdout.trim()
    );
    let in_flight = active_at(&f, &kill_times);
    let requeues = requeues(&f).len();
    eprintln!("soak: {requeues} claims requeued by recovery as never started");
    let mut histogram: BTreeMap<usize, usize> = BTreeMap::new();
    for n in &in_flight {
        *histogram.entry(*n).or_default() += 1;
    }
    eprintln!(
        "soak: runs the database held active at the SIGKILLs (active runs: kills): {histogram:?} \
         ({} of {kills} kills hit runs in flight)",
        in_flight.iter().filter(|&&n| n > 0).count()
    );
    for r in &lost {
        eprintln!("lost run: {r}");
    }

    // ---- fleet check ----
    assert_eq!(
        check.code(),
        Some(0),
        "fleet check found violations (seed {seed}):\n{}{}",
        check.stdout,
        check.stderr
    );

    // ---- every run reached exactly one terminal status ----
    assert!(runs.iter().all(is_terminal), "not all terminal: {runs:#?}");
    let ends = terminal_events(&f);
    for r in &runs {
        let id = r["id"].as_i64().unwrap();
        assert_eq!(
            ends.get(&id).copied().unwrap_or(0),
            1,
            "run {id} has {} terminal events (seed {seed}): {r}",
            ends.get(&id).copied().unwrap_or(0)
        );
    }
    let by_id: BTreeMap<i64, &Value> = runs
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), r))
        .collect();
    for id in manual.keys() {
        assert!(
            by_id.contains_key(id),
            "enqueued run {id} is missing from `fleet runs`"
        );
    }

    // ---- the commands' own records: at most one start per run id (= attempt), caps held ----
    let overlap = try_max_overlap(&records).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    eprintln!("soak overlap: {overlap:?}");
    overlap
        .check(GLOBAL_CAP, &[("a", CAP_A), ("b", CAP_B)])
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let mut starts: BTreeMap<i64, usize> = BTreeMap::new();
    let mut ends_rec: BTreeMap<i64, usize> = BTreeMap::new();
    for r in &records {
        *if r.start { &mut starts } else { &mut ends_rec }
            .entry(r.run_id)
            .or_default() += 1;
        let run = by_id.get(&r.run_id).unwrap_or_else(|| {
            panic!(
                "a command recorded run {} that fleet does not know",
                r.run_id
            )
        });
        assert_eq!(
            run["project"].as_str(),
            Some(r.project.as_str()),
            "{r:?} vs {run}"
        );
        assert_eq!(
            run["namespace"].as_str(),
            Some(r.namespace.as_str()),
            "{r:?} vs {run}"
        );
    }

    // ---- every run ended as its command decided; nothing lost ----
    assert!(
        lost.is_empty(),
        "seed {seed}: {} run(s) lost although only the daemon was ever killed (shims survive it): {lost:#?}",
        lost.len()
    );
    for r in &runs {
        let id = r["id"].as_i64().unwrap();
        let status = r["status"].as_str().unwrap();
        assert!(
            matches!(status, "succeeded" | "failed"),
            "seed {seed}: run {id} ended {status}: {r}"
        );
        assert_eq!(
            (
                starts.get(&id).copied().unwrap_or(0),
                ends_rec.get(&id).copied().unwrap_or(0)
            ),
            (1, 1),
            "seed {seed}: run {id} ({status}) must have exactly one start and one end record: {r}"
        );
        let expected_code = if status == "succeeded" { 0 } else { FAIL_CODE };
        assert_eq!(
            r["exit_code"].as_i64(),
            Some(expected_code),
            "seed {seed}: {r}"
        );
    }

    // ---- retries: exactly the chains the commands ask for ----
    let retry_of = retry_of(&f);
    let mut children: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (child, parent) in &retry_of {
        children.entry(*parent).or_default().push(*child);
    }
    let mut seen = BTreeSet::new();
    for (&id, &p) in &manual {
        let (project, _, _, kind) = PROJECTS[p];
        let first = by_id[&id];
        let chain: Vec<&Value> = std::iter::once(first)
            .chain(children.get(&id).into_iter().flatten().map(|c| by_id[c]))
            .collect();
        for r in &chain {
            seen.insert(r["id"].as_i64().unwrap());
        }
        let got: Vec<(i64, &str, &str)> = chain
            .iter()
            .map(|r| {
                (
                    r["attempt"].as_i64().unwrap(),
                    r["trigger"].as_str().unwrap(),
                    r["status"].as_str().unwrap(),
                )
            })
            .collect();
        let expected: Vec<(i64, &str, &str)> = match kind {
            Kind::Ok => vec![(1, "manual", "succeeded")],
            Kind::FailOnce => vec![(1, "manual", "failed"), (2, "retry", "succeeded")],
            Kind::FailAlways => vec![(1, "manual", "failed"), (2, "retry", "failed")],
        };
        assert_eq!(
            got, expected,
            "seed {seed}: run {id} of {project} ({kind:?}) and its retries"
        );
        if let Some(grand) = chain
            .get(1)
            .and_then(|c| children.get(&c["id"].as_i64().unwrap()))
        {
            panic!("seed {seed}: run {id}'s retry was retried again ({grand:?}) past retries = 1");
        }
    }
    let unexplained: Vec<&&Value> = by_id
        .iter()
        .filter(|(id, _)| !seen.contains(id))
        .map(|(_, r)| r)
        .collect();
    assert!(
        unexplained.is_empty(),
        "seed {seed}: runs neither enqueued by the test nor retries of them: {unexplained:#?}"
    );
    d.kill();
}

/// The one-daemon rule must not turn against the operator: `fleet status` (and any command that
/// asks whether a daemon runs) must never make a daemon that is starting refuse to start.
///
/// Regression test for a bug this file found (fixed in 07d544b): `daemon_holder()`
/// (crates/supervisor/src/statedir.rs), behind `fleet status`, probed the daemon lock by
/// *taking* it (`flock(LOCK_EX|LOCK_NB)`) and releasing it, while `lock_daemon()` tries the lock
/// once, without waiting, and on failure refuses to start naming the pid left in the lock file —
/// a dead daemon's. A daemon starting while a status probe held the lock for a few microseconds
/// exited 1 with "another fleet daemon (pid N) holds the state directory" although none ran
/// (1 to 7 refusals per 600 starts here). The harness's own `start_daemon` polls `fleet status`
/// while the daemon starts, so every test was exposed to it.
///
/// The race is narrow, so this repeats it: `FLEET_RACE_STARTS` daemon starts (default 600, about
/// 15 s), each while `PROBERS` threads run `fleet status` in a loop. Each start must take the
/// lock (the lock file names the daemon's pid once it holds it).
const PROBERS: usize = 6;

#[test]
fn status_probes_never_make_a_starting_daemon_refuse() {
    use_private_bin();
    use std::sync::atomic::{AtomicBool, Ordering};
    let starts = env_u64("FLEET_RACE_STARTS").unwrap_or(600) as usize;
    let f = Fleet::new("max_concurrency = 1\n[projects.p]\ncommand = [\"true\"]\n");
    let lock = f.state_dir().join("daemon.lock");
    let stop = AtomicBool::new(false);
    let mut refusals = Vec::new();
    let began = Instant::now();
    let probes = std::thread::scope(|scope| {
        let probers: Vec<_> = (0..PROBERS)
            .map(|_| {
                scope.spawn(|| {
                    let mut n = 0usize;
                    while !stop.load(Ordering::SeqCst) {
                        let out = f.cmd(&["status", "--json"]);
                        // 0 running, 3 no daemon, 1 a daemon still starting or already
                        // stopping (its socket not answering): anything else is a failure.
                        assert!(
                            matches!(out.code(), Some(0 | 1 | 3)),
                            "fleet status failed: {out:?}"
                        );
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        // Set however this thread leaves the scope: a failed start must not leave the probers
        // running, and the scope waiting for them.
        let _stop_probers = StopOnDrop(&stop);
        for i in 0..starts {
            // One log file, recreated for each start: only a refusal's is read.
            let mut d = f.spawn_daemon_logged(&[], &f.file("race-daemon.stderr"));
            let pid = d.pid().to_string();
            let deadline = Instant::now() + DEADLINE;
            // Up when the lock file names it (written once it holds the lock); refused if it exits.
            let exited = loop {
                if let Some(st) = d.try_exit() {
                    break Some(st);
                }
                let holder = std::fs::read_to_string(&lock).unwrap_or_default();
                if holder.split_whitespace().next() == Some(pid.as_str()) {
                    break None;
                }
                if Instant::now() > deadline {
                    panic!("daemon start {i}: neither up nor gone after {DEADLINE:?}");
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            if let Some(st) = exited {
                refusals.push(format!(
                    "start {i}: the daemon exited ({st}): {}",
                    d.stderr().trim()
                ));
            } else {
                d.kill();
            }
        }
        stop.store(true, Ordering::SeqCst);
        probers
            .into_iter()
            .map(|p| p.join().unwrap())
            .sum::<usize>()
    });
    eprintln!(
        "{starts} daemon starts against {probes} `fleet status` probes in {:.1}s: {} refused",
        began.elapsed().as_secs_f64(),
        refusals.len()
    );
    assert!(
        refusals.is_empty(),
        "{} of {starts} daemon starts were refused although no daemon ran (a `fleet status` \
         probe held the daemon lock for an instant):\n{}",
        refusals.len(),
        refusals.join("\n")
    );
}
