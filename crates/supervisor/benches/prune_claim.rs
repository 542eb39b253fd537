//! Claim latency while pruning runs in the background, against without (docs/PERFORMANCE.md,
//! "What each measure does", item 7).
//!
//! The install: 100,000 ended runs (`FLEET_BENCH_ENDED` to change it) over 100 projects, each
//! with the four events a real run leaves (queued, starting, running, succeeded), all ended a
//! day ago, and `2 × CLAIMS` queued runs, one per project of their own. The store is opened as
//! the daemon opens it (WAL, `synchronous = FULL`).
//!
//! One measured claim is `Store::claim` of one queued run, one durable transaction, timed on
//! its own; claims are 2 ms apart (untimed), as a daemon's are spread over its EVALs. The
//! `2 × CLAIMS` claims go in blocks of 25, alternately alone and while another thread runs
//! `supervisor::prune::prune_batch` back to back (the daemon's own batches, with
//! `keep_runs = 1`, so that every batch has work) — far more pruning than a daemon ever does
//! (one step of at most ten batches every 30 ticks). Alternating blocks keep the machine's
//! drifting load from favouring either side. The run files do not
//! exist here: removing them happens outside any transaction, so it costs claims CPU only.
//!
//! Prints one line per phase (median, p99, max in ms), the ratios, and one JSON line for the
//! suite: `{"prune_claim": {...}}`.
//!
//! ```sh
//! cargo bench -p supervisor --bench prune_claim
//! FLEET_BENCH_ENDED=5000 cargo bench -p supervisor --bench prune_claim    # tiny, CI
//! ```
//!
//! Setup fills the database with rusqlite in one transaction; nothing measured touches SQLite
//! except through `store`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use store::{ClaimRequest, Keep, PrunePolicy, RunId, Store};
use supervisor::statedir::StateDir;

/// Claims measured in each phase.
const CLAIMS: usize = 400;
/// Claims per block; blocks alternate between alone and while pruning.
const BLOCK: usize = 25;
/// Projects the ended runs belong to.
const PROJECTS: usize = 100;

fn ended_count() -> usize {
    std::env::var("FLEET_BENCH_ENDED")
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(100_000)
}

/// `ended` ended runs with their four events, and `queued` queued runs (one project each).
/// Returns the queued runs' ids. Setup only.
fn fill(db: &Path, ended: usize, queued: usize, now: i64) -> Vec<RunId> {
    let mut conn = rusqlite::Connection::open(db).expect("open fleet.db for setup");
    let tx = conn.transaction().expect("begin setup");
    let mut ids = Vec::new();
    {
        let mut run = tx
            .prepare(
                "INSERT INTO runs (project, namespace, status, attempt, trigger, enqueued_at, \
                   started_at, finished_at, exit_code, claim_token, epoch) \
                 VALUES (?1, 'default', ?2, 1, 'manual', ?3, ?3, ?4, ?5, 1, 1)",
            )
            .unwrap();
        let mut event = tx
            .prepare(
                "INSERT INTO events (run_id, at, epoch, from_status, to_status, project, \
                   namespace, attempt, claim_token) VALUES (?1, ?2, 1, ?3, ?4, ?5, 'default', 1, 1)",
            )
            .unwrap();
        let day_ago = now - 86_400_000;
        for i in 0..ended {
            let p = format!("old{:03}", i % PROJECTS);
            run.execute(rusqlite::params![p, "succeeded", day_ago, day_ago + 10, 0])
                .unwrap();
            let id = tx.last_insert_rowid();
            for (from, to) in [
                (None, "queued"),
                (Some("queued"), "starting"),
                (Some("starting"), "running"),
                (Some("running"), "succeeded"),
            ] {
                event
                    .execute(rusqlite::params![id, day_ago, from, to, p])
                    .unwrap();
            }
        }
        for i in 0..queued {
            let p = format!("q{i:04}");
            tx.execute(
                "INSERT INTO runs (project, namespace, status, attempt, trigger, enqueued_at) \
                 VALUES (?1, 'default', 'queued', 1, 'manual', ?2)",
                rusqlite::params![p, now],
            )
            .unwrap();
            ids.push(tx.last_insert_rowid());
        }
    }
    tx.commit().expect("commit setup");
    ids
}

/// The untimed pause between two claims: a daemon claims once per EVAL, never back to back,
/// and a pruner that never found the write lock free would measure nothing.
const GAP: Duration = Duration::from_millis(2);

/// Claims each of `ids`, one transaction each, [`GAP`] apart; returns each claim's wall time.
fn claim_all(store: &Store, epoch: i64, ids: &[RunId]) -> Vec<Duration> {
    ids.iter()
        .map(|&id| {
            std::thread::sleep(GAP);
            let req = ClaimRequest {
                run_id: id,
                namespace: "default".into(),
                global_cap: 1_000_000,
                namespace_cap: None,
                max_parallel: 1,
                host_cap: None,
                config_version: None,
            };
            let t = Instant::now();
            let claimed = store.claim(epoch, &[req], store::now_ms()).expect("claim");
            let took = t.elapsed();
            assert_eq!(claimed.len(), 1, "run {id} claimed");
            took
        })
        .collect()
}

/// (median, p99, max) in milliseconds.
fn summary(mut d: Vec<Duration>) -> (f64, f64, f64) {
    d.sort();
    let ms = |x: Duration| x.as_secs_f64() * 1e3;
    let at = |q: f64| ms(d[((d.len() as f64 - 1.0) * q).round() as usize]);
    (at(0.5), at(0.99), ms(*d.last().unwrap()))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let ended = ended_count();
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::new(dir.path().join("state"));
    let store = state.open_store().expect("open store");
    let now = store::now_ms();
    let t = Instant::now();
    let queued = fill(&state.db_path(), ended, 2 * CLAIMS, now);
    eprintln!(
        "setup: {ended} ended runs, {} queued, in {:.1} s",
        queued.len(),
        t.elapsed().as_secs_f64()
    );
    let epoch = store
        .take_over("local", std::process::id() as i32, "bench", "{}", now)
        .unwrap();

    let policy = PrunePolicy {
        default: Keep {
            newest: Some(1),
            finished_after: None,
        },
        projects: Default::default(),
        ended_before: now,
        host: None,
    };
    // The pruner prunes while `active`, and says when it is `idle` (between two batches, with
    // `active` off), so that no claim of an "alone" block overlaps a batch still finishing.
    let active = Arc::new(AtomicBool::new(false));
    let idle = Arc::new(AtomicBool::new(true));
    let done = Arc::new(AtomicBool::new(false));
    let pruned = Arc::new(AtomicUsize::new(0));
    let batches = Arc::new(AtomicUsize::new(0));
    let pruner = {
        let (store, active, idle, done, pruned, batches) = (
            store.clone(),
            active.clone(),
            idle.clone(),
            done.clone(),
            pruned.clone(),
            batches.clone(),
        );
        let root = state.root().to_path_buf();
        std::thread::spawn(move || -> bool {
            let mut busy_throughout = true;
            while !done.load(Ordering::SeqCst) {
                if !active.load(Ordering::SeqCst) {
                    idle.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                idle.store(false, Ordering::SeqCst);
                let p = supervisor::prune::prune_batch(&root, &store, &policy, false)
                    .expect("prune batch");
                if p.runs.is_empty() {
                    busy_throughout = false; // ran out of work
                }
                pruned.fetch_add(p.runs.len(), Ordering::Relaxed);
                batches.fetch_add(1, Ordering::Relaxed);
            }
            busy_throughout
        })
    };
    // Blocks of claims, alone and while pruning in turn, so that the machine's load drifting
    // over the run weighs on both alike.
    let mut without = Vec::new();
    let mut with = Vec::new();
    let t = Instant::now();
    for (i, block) in queued.chunks(BLOCK).enumerate() {
        let pruning = i % 2 == 1;
        active.store(pruning, Ordering::SeqCst);
        if pruning {
            let before = batches.load(Ordering::SeqCst);
            // Under way: the first batch has started (it is not idle) or even ended.
            while idle.load(Ordering::SeqCst) && batches.load(Ordering::SeqCst) == before {
                std::thread::yield_now();
            }
            with.extend(claim_all(&store, epoch, block));
        } else {
            while !idle.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            without.extend(claim_all(&store, epoch, block));
        }
    }
    let claim_phase = t.elapsed();
    done.store(true, Ordering::SeqCst);
    let busy_throughout = pruner.join().unwrap();
    let (pruned, batches) = (
        pruned.load(Ordering::Relaxed),
        batches.load(Ordering::Relaxed),
    );

    let (m0, p0, x0) = summary(without);
    let (m1, p1, x1) = summary(with);
    println!("claims alone:           median {m0:.2} ms, p99 {p0:.2} ms, max {x0:.2} ms");
    println!(
        "claims while pruning:   median {m1:.2} ms, p99 {p1:.2} ms, max {x1:.2} ms \
         ({pruned} runs pruned in {batches} batches; {:.1} s in all; pruner never out of work: {busy_throughout})",
        claim_phase.as_secs_f64()
    );
    println!("ratio: median {:.2}x, p99 {:.2}x", m1 / m0, p1 / p0);
    println!(
        "{{\"prune_claim\": {{\"ended\": {ended}, \"claims\": {CLAIMS}, \"alone_median_ms\": {m0:.3}, \
         \"alone_p99_ms\": {p0:.3}, \"pruning_median_ms\": {m1:.3}, \"pruning_p99_ms\": {p1:.3}, \
         \"pruned\": {pruned}, \"batches\": {batches}, \"busy_throughout\": {busy_throughout}}}}}"
    );
}
