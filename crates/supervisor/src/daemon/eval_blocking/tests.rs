//! The EVAL's database half: the claim's guards and the merge, on a real SQLite store.

use std::path::Path;
use std::time::Duration;

use packer::ActiveRun;
use store::NewRun;

use super::*;
use crate::schedule::FireBackoff;

const NOW: Millis = 1_800_000_000_000;

/// An install of one daemon with a global cap of 1 and two projects, `a` and `b`, on a
/// SQLite store under `dir`: the store, the config, the daemon's epoch.
fn install(dir: &Path) -> (Store, Config, i64) {
    let text = format!(
        "state_dir = {:?}\nmax_concurrency = 1\n\
         [projects.a]\ncommand = [\"true\"]\n[projects.b]\ncommand = [\"true\"]\n",
        dir.display().to_string()
    );
    let config = Config::parse(&text, &dir.join("fleet.toml")).expect("config");
    let store = Store::open(&dir.join("fleet.db"), Duration::from_secs(5)).expect("store");
    let caps = crate::caps::caps_json(&config);
    let epoch = store
        .take_over_from(&config.host, None, 1, "fleet.toml", &caps, NOW)
        .expect("take over");
    (store, config, epoch)
}

fn enqueue(store: &Store, project: &str) -> RunId {
    let new = NewRun {
        project: project.into(),
        namespace: "default".into(),
        ..NewRun::default()
    };
    store.enqueue(&new, NOW).expect("enqueue")
}

fn gates() -> EvalGates {
    EvalGates {
        sweep_removed: true,
        fire_schedules: true,
        claim: true,
        config_version: None,
    }
}

/// The first half of an EVAL with the pool's running set `live`: what it read, and the
/// claim requests of its picks.
fn pack(
    store: &Store,
    config: &Config,
    epoch: i64,
    live: RunningSet,
) -> (EvalOutcome, Vec<ClaimRequest>) {
    eval_until_claim(
        store,
        epoch,
        config,
        Vec::new(),
        live,
        gates(),
        &mut FireBackoff::default(),
        &mut ClaimBackoff::default(),
        NOW,
    )
}

/// A whole EVAL with the pool's running set `live`: the runs it claimed.
fn claim(store: &Store, config: &Config, epoch: i64, live: RunningSet) -> Vec<Run> {
    let (mut out, requests) = pack(store, config, epoch, live);
    claim_packed(
        store,
        epoch,
        &requests,
        &mut ClaimBackoff::default(),
        NOW,
        &mut out,
    );
    assert!(out.failed.is_none(), "{:?}", out.failed);
    out.claimed
}

fn ids(requests: &[ClaimRequest]) -> Vec<RunId> {
    requests.iter().map(|r| r.run_id).collect()
}

/// The end of a command that exited 0.
fn finish() -> Change {
    Change::Finish {
        status: RunStatus::Succeeded,
        exit_code: Some(0),
        signal: None,
        reason: None,
        retry: None,
        finished_at: None,
    }
}

fn pool_of(run: &Run) -> RunningSet {
    std::iter::once(ActiveRun {
        run_id: run.id,
        project: run.project.clone(),
        namespace: run.namespace.clone(),
        host: None,
    })
    .collect()
}

/// A run cancelled between an EVAL's packing and its claim is not claimed: the claim checks
/// the run is still queued in its own transaction, whatever the packing read.
#[test]
fn a_run_cancelled_after_the_packing_is_not_claimed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, config, epoch) = install(dir.path());
    let id = enqueue(&store, "a");
    let (mut out, requests) = pack(&store, &config, epoch, RunningSet::default());
    assert_eq!(ids(&requests), [id]);
    let cancelled = store.cancel_queued_runs(&[id], "by hand", NOW);
    assert_eq!(cancelled.expect("cancel"), [id]);
    let mut claim_backoff = ClaimBackoff::default();
    claim_packed(&store, epoch, &requests, &mut claim_backoff, NOW, &mut out);
    assert!(out.failed.is_none(), "{:?}", out.failed);
    assert!(out.claimed.is_empty(), "claimed {:?}", out.claimed);
    assert_eq!(store.get_run(id).expect("row").status, RunStatus::Cancelled);
}

/// After a restart the pool is empty while the database still lists a run in flight: the
/// packing counts it (the merge), and picks nothing over the cap.
#[test]
fn a_run_the_database_holds_active_takes_its_seat_though_the_pool_is_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, config, epoch) = install(dir.path());
    enqueue(&store, "a");
    assert_eq!(
        claim(&store, &config, epoch, RunningSet::default()).len(),
        1
    );
    enqueue(&store, "b");
    let (_, requests) = pack(&store, &config, epoch, RunningSet::default());
    assert!(requests.is_empty(), "picked {:?}", ids(&requests));
}

/// A command the pool still runs takes its seat though its row was ended (by another
/// program): the packing counts the pool too (the merge), and picks nothing over the cap
/// until its slot goes. The claim, which counts the database's rows alone, would not stop
/// it.
#[test]
fn a_command_the_pool_runs_takes_its_seat_though_its_row_ended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, config, epoch) = install(dir.path());
    enqueue(&store, "a");
    let a = claim(&store, &config, epoch, RunningSet::default())[0].clone();
    let end = Transition {
        run_id: a.id,
        token: a.claim_token,
        change: finish(),
    };
    // Written as another writer would: the row ends while the command runs on.
    store
        .apply_with_hooks(epoch, &[end], &Default::default(), NOW)
        .expect("end");
    let b = enqueue(&store, "b");
    assert!(claim(&store, &config, epoch, pool_of(&a)).is_empty());
    // Its slot gone, the seat is free.
    let claimed = claim(&store, &config, epoch, RunningSet::default());
    assert_eq!(claimed.iter().map(|r| r.id).collect::<Vec<_>>(), [b]);
}

/// The packing's running set loses a run whose end a transition of this EVAL wrote, keeps
/// one whose start report the database skipped (its command runs), and loses one whose end
/// it skipped (the database already holds it past active).
#[test]
fn without_ended_drops_the_runs_a_written_end_took_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, config, epoch) = install(dir.path());
    enqueue(&store, "a");
    let a = claim(&store, &config, epoch, RunningSet::default())[0].clone();
    let live = pool_of(&a);
    let start = Transition {
        run_id: a.id,
        token: a.claim_token,
        change: Change::Running { pid: Some(1) },
    };
    let end = Transition {
        change: finish(),
        ..start.clone()
    };
    let skipped = Applied::Skipped("the run is already past it".into());
    let kept = without_ended(live.clone(), &[start], std::slice::from_ref(&skipped));
    assert_eq!(kept.len(), 1);
    assert_eq!(without_ended(live, &[end], &[skipped]).len(), 0);
}
