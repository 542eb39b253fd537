//! EVAL cost against the length of the queue (docs/PERFORMANCE.md, "What each measure does",
//! item 2).
//!
//! What one measured iteration is: one call of the daemon's own
//! `supervisor::daemon::eval_blocking` — `Store::active_runs`, `packer::merge` with the (empty)
//! slot pool, `Config::caps`, `Store::queue_heads`, the packer chosen by `packer::packer_for`,
//! `Store::next_not_before`, and `Store::claim` of every pick in one transaction (committed with
//! `synchronous = FULL`, as the daemon's are). Nothing is reaped (no shim exited), no project has
//! a schedule, and the sweep of removed projects is off (every queued project is in the config),
//! as in a daemon's steady state.
//!
//! The install: 1,000 namespaces (`max_concurrency = 2`), one project in each, a global cap of
//! 16, and N queued runs spread evenly over the projects, enqueued interleaved (run i belongs to
//! project i mod 1,000) as independent `fleet enqueue`s would be. Nothing is active, so every EVAL
//! packs 16 free slots out of 1,000 queue heads and claims 16 runs. Between iterations, untimed,
//! the 16 claims are put back (`Store::apply` of a `Requeue`, the transition recovery uses), so
//! every iteration sees the same queue.
//!
//! Target: the EVAL with N = 100,000 within 1.1x of the one with N = 1,000 — an EVAL's cost
//! follows the number of projects and free slots, never the backlog.
//!
//! Two measurements of the same EVAL:
//!
//! * criterion, one size after the other (`eval/<N>`): a figure per size, with its confidence
//!   interval. Its ratios carry whatever the machine did between the sizes: every EVAL ends with
//!   a durable commit, and the `fsync` of a virtual disk drifts by more than 10 % over a minute.
//! * interleaved (`eval/interleaved`), the judged ratio: every size's install is set up first,
//!   then each round times one EVAL of every size, in an order that rotates from round to round,
//!   so that a drift of the disk or the CPU lands on all sizes alike. Reported: each size's
//!   median over the rounds, and their ratios to the smallest size's.
//!
//! Run it (criterion writes `target/criterion/eval/<N>/new/estimates.json`; the interleaved
//! figures are printed, and written as JSON to `$FLEET_BENCH_INTERLEAVED_OUT` when set):
//!
//! ```sh
//! cargo bench -p supervisor --bench eval                          # N = 1k, 10k, 100k
//! FLEET_BENCH_SIZES=1000,10000 cargo bench -p supervisor --bench eval -- --quick   # tiny, CI
//! cargo bench -p supervisor --bench eval -- interleaved   # a filter no criterion bench matches:
//!                                                          # the interleaved rounds only
//! ```
//!
//! Setup fills the database with rusqlite in one transaction (runs and their `queued` events,
//! the rows `Store::enqueue` writes): a hundred thousand `Store::enqueue` calls, each a durable
//! transaction, would take longer than the whole measurement. Nothing measured touches SQLite
//! except through `store`.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use config::Config;
use criterion::{criterion_group, BenchmarkId, Criterion};
use packer::RunningSet;
use store::{Applied, Change, Run, RunStatus, Store, StoreError, Transition};
use supervisor::daemon::{eval_blocking, EvalGates};
use supervisor::statedir::StateDir;

/// Namespaces in the install, one project in each.
const NAMESPACES: usize = 1_000;
/// `max_concurrency` of every namespace.
const NAMESPACE_CAP: usize = 2;
/// The global `max_concurrency`: the runs each EVAL claims, since nothing is active.
const GLOBAL_CAP: usize = 16;
/// Queue lengths measured unless `FLEET_BENCH_SIZES` names others.
const DEFAULT_SIZES: &[usize] = &[1_000, 10_000, 100_000];

/// The sizes to measure: `FLEET_BENCH_SIZES=1000,10000` (comma-separated), else [`DEFAULT_SIZES`].
fn sizes() -> Vec<usize> {
    match std::env::var("FLEET_BENCH_SIZES") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|s| {
                s.trim()
                    .replace('_', "")
                    .parse()
                    .unwrap_or_else(|_| panic!("FLEET_BENCH_SIZES: {s:?} is not a number"))
            })
            .collect(),
        _ => DEFAULT_SIZES.to_vec(),
    }
}

fn project(i: usize) -> String {
    format!("p{i:04}")
}

fn namespace(i: usize) -> String {
    format!("ns{i:04}")
}

/// fleet.toml for the install described at the top.
fn config_text(state_dir: &Path) -> String {
    let mut text = format!(
        "state_dir = {:?}\nmax_concurrency = {GLOBAL_CAP}\ntick = \"1h\"\n",
        state_dir.display().to_string()
    );
    for i in 0..NAMESPACES {
        text.push_str(&format!(
            "\n[namespaces.{}]\nmax_concurrency = {NAMESPACE_CAP}\n",
            namespace(i)
        ));
    }
    for i in 0..NAMESPACES {
        text.push_str(&format!(
            "\n[projects.{}]\nnamespace = \"{}\"\ncommand = [\"true\"]\n",
            project(i),
            namespace(i)
        ));
    }
    text
}

/// Queues `n` runs, run i of project i mod [`NAMESPACES`], with the rows `Store::enqueue` writes
/// (the run and its `queued` event), in one transaction. Setup only.
fn fill(db: &Path, n: usize, now: i64) {
    let mut conn = rusqlite::Connection::open(db).expect("open fleet.db for setup");
    let tx = conn.transaction().expect("begin setup transaction");
    {
        let mut run = tx
            .prepare(
                "INSERT INTO runs (project, namespace, status, attempt, trigger, priority, \
                   not_before, enqueued_at) VALUES (?1, ?2, 'queued', 1, 'manual', 0, 0, ?3)",
            )
            .expect("prepare run insert");
        let mut event = tx
            .prepare(
                "INSERT INTO events (run_id, at, to_status, project, namespace, attempt, \
                   claim_token) VALUES (?1, ?2, 'queued', ?3, ?4, 1, 0)",
            )
            .expect("prepare event insert");
        for i in 0..n {
            let (p, ns) = (project(i % NAMESPACES), namespace(i % NAMESPACES));
            run.execute(rusqlite::params![p, ns, now])
                .expect("insert run");
            let id = tx.last_insert_rowid();
            event
                .execute(rusqlite::params![id, now, p, ns])
                .expect("insert event");
        }
    }
    tx.commit().expect("commit setup");
}

/// One state directory with `n` queued runs, taken over by "the daemon" (this process).
struct Install {
    _dir: tempfile::TempDir,
    config: Config,
    store: Store,
    epoch: i64,
    /// The slot pool: empty, as every claim is put back before the next EVAL.
    live: RunningSet,
}

impl Install {
    fn new(n: usize) -> Install {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("fleet.toml");
        let text = config_text(&dir.path().join("state"));
        std::fs::write(&path, &text).expect("write fleet.toml");
        let config = Config::parse(&text, &path).expect("valid fleet.toml");
        let state = StateDir::new(&config.state_dir);
        // As the daemon opens it: schema migrated, WAL, synchronous = FULL.
        let store = state.open_store().expect("open store");
        let now = store::now_ms();
        fill(&state.db_path(), n, now);
        let epoch = store
            .take_over(
                "local",
                std::process::id() as i32,
                &path.display().to_string(),
                "{}",
                now,
            )
            .expect("take over");
        let install = Install {
            _dir: dir,
            config,
            store,
            epoch,
            live: RunningSet::new(),
        };
        assert_eq!(
            install.store.queue_heads(now).expect("queue heads").len(),
            NAMESPACES.min(n),
            "every project with a queued run has a queue head"
        );
        install
    }

    /// One EVAL: the daemon's own `supervisor::daemon::eval_blocking`, with nothing reaped and
    /// the (empty) slot pool as the live running set.
    fn eval(&self) -> Result<Vec<Run>, StoreError> {
        let out = eval_blocking(
            &self.store,
            self.epoch,
            &self.config,
            Vec::new(),
            self.live.clone(),
            EvalGates {
                config_version: None,
                sweep_removed: false,
                fire_schedules: true,
                claim: true,
            },
            &mut Default::default(),
            &mut Default::default(),
            store::now_ms(),
        );
        black_box(out.next_not_before);
        match out.failed {
            Some((e, _)) => Err(e),
            None => Ok(out.claimed),
        }
    }

    /// Puts claimed runs back in the queue, same attempt, same id (so the same queue heads).
    fn requeue(&self, claimed: &[Run]) {
        let batch: Vec<Transition> = claimed
            .iter()
            .map(|r| Transition {
                run_id: r.id,
                token: r.claim_token,
                change: Change::Requeue {
                    reason: "bench: put back".to_string(),
                },
            })
            .collect();
        let applied = self
            .store
            .apply(self.epoch, &batch, store::now_ms())
            .expect("requeue the claims");
        for a in applied {
            assert!(
                matches!(
                    a,
                    Applied::Done {
                        status: RunStatus::Queued,
                        ..
                    }
                ),
                "claim not put back: {a:?}"
            );
        }
    }
}

fn eval_against_queue_size(c: &mut Criterion) {
    let mut group = c.benchmark_group("eval");
    // Three sizes in well under 90 s on 2 cores while an EVAL takes milliseconds: each iteration
    // also pays an untimed requeue, about as long as the EVAL itself, and the 100k setup takes
    // about two seconds.
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    for n in sizes() {
        let install = Install::new(n);
        let start = Instant::now();
        let first = install.eval().expect("first EVAL");
        let first_took = start.elapsed();
        assert_eq!(
            first.len(),
            GLOBAL_CAP.min(n),
            "one EVAL fills the free slots"
        );
        install.requeue(&first);
        // An EVAL that reads the whole backlog (seconds at 100k) gets criterion's fewest samples:
        // a regression is still measured, in minutes rather than in tens of minutes.
        group.sample_size(if first_took > Duration::from_millis(100) {
            10
        } else {
            30
        });
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let claimed = install.eval().expect("EVAL");
                    timed += start.elapsed();
                    assert_eq!(claimed.len(), GLOBAL_CAP.min(n));
                    install.requeue(&claimed);
                }
                timed
            })
        });
    }
    group.finish();
}

/// Rounds of the interleaved measurement: each round times one EVAL per size.
const ROUNDS: usize = 300;
/// Rounds with `--quick` (CI's tiny run: it shows the measurement works, judges nothing).
const QUICK_ROUNDS: usize = 20;

/// The interleaved measurement (see the top of this file): every install set up first, then
/// `rounds` rounds of one timed EVAL per size, the order rotating each round. Prints each size's
/// median and its ratio to the first size's, and writes them as JSON to
/// `$FLEET_BENCH_INTERLEAVED_OUT` when that is set.
fn interleaved(rounds: usize) {
    let sizes = sizes();
    let installs: Vec<Install> = sizes.iter().map(|&n| Install::new(n)).collect();
    // One untimed EVAL each first: the same warm-up criterion gives every size.
    for install in &installs {
        let claimed = install.eval().expect("first EVAL");
        install.requeue(&claimed);
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); sizes.len()];
    // An EVAL that grew with the queue (a regression: seconds at 100k) ends the rounds early
    // rather than the suite's budget: at least ten rounds, then none started past a minute.
    let began = Instant::now();
    let mut rounds_done = 0;
    for round in 0..rounds {
        if round >= 10 && began.elapsed() > Duration::from_secs(60) {
            break;
        }
        rounds_done += 1;
        for k in 0..sizes.len() {
            let i = (round + k) % sizes.len();
            let start = Instant::now();
            let claimed = installs[i].eval().expect("EVAL");
            samples[i].push(start.elapsed());
            assert_eq!(claimed.len(), GLOBAL_CAP.min(sizes[i]));
            installs[i].requeue(&claimed);
        }
    }
    let medians: Vec<f64> = samples
        .iter_mut()
        .map(|s| {
            s.sort();
            s[s.len() / 2].as_nanos() as f64
        })
        .collect();
    let mut json = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let ratio = medians[i] / medians[0];
        println!(
            "eval/interleaved/{n}: median {:.3} ms over {rounds_done} rounds, {ratio:.3}x the {} queued",
            medians[i] / 1e6,
            sizes[0]
        );
        json.push(serde_json::json!({
            "queued": n,
            "median_ns": medians[i],
            "ratio_to_first": ratio,
            "rounds": rounds_done,
        }));
    }
    if let Ok(path) = std::env::var("FLEET_BENCH_INTERLEAVED_OUT") {
        let text = serde_json::to_string_pretty(&json).expect("JSON of numbers");
        std::fs::write(&path, text)
            .unwrap_or_else(|e| panic!("FLEET_BENCH_INTERLEAVED_OUT={path}: cannot write: {e}"));
    }
}

criterion_group!(benches, eval_against_queue_size);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench -- <filter>` and `--list` are criterion's business; the interleaved run
    // honours only `--quick`, and is skipped when criterion is asked merely to list.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    interleaved(if quick { QUICK_ROUNDS } else { ROUNDS });
}
