//! Recovery's decisions: what became of each run a previous daemon of this host left active
//! ([`settle_runs`], from the run files, through [`crate::settle`]), and the transitions that
//! follow ([`transitions`]). Applying them (adopting live shims, following them, killing what
//! is left of an orphaned command) is the caller's: the daemon's `daemon/recover.rs`, or the
//! simulator's.

use std::path::Path;

use config::Config;
use runrecord::RunFiles;
use store::{Millis, Run, RunId, RunStatus, Transition};

use crate::boot::Boots;
use crate::retry::RetryPolicy;
use crate::settle::{self, Fate};
use crate::slots::{ShimIdentity, Slot};

/// What recovery decided, before any of it is applied.
pub struct Found {
    /// Runs whose shim is alive, to adopt, with the shim when its started record names it.
    pub adopt: Vec<(Run, Option<ShimIdentity>)>,
    /// `running` for adopted runs the database still has as `starting`.
    pub transitions: Vec<Transition>,
    /// The other runs and their fates; their transitions (and retries) are decided once the
    /// config is known to be the file's.
    pub settled: Vec<(Run, Fate)>,
    /// Runs whose files could not be read or written, or whose rows could not be read: (run,
    /// claim token).
    pub unsettled: Vec<(RunId, u64)>,
    /// Runs whose shim is gone while their command's process group lives on
    /// ([`Fate::Orphaned`]; the caller sends the group SIGKILL when its session identifies it), or whose files are gone while their
    /// command's process group lives on, with that group and its session when known: kept
    /// active, followed until the group is empty.
    pub orphaned: Vec<(Run, i32, Option<crate::sys::process::Session>)>,
    /// Runs taken from this host: the database holds them as ended `lost` by a
    /// `fleet hosts forget` — under the very claim a live shim here still holds, on this host —
    /// while this host's daemon was away. Their commands are stopped as a cancel stops one, and
    /// their slots held until their shims are gone. Filled by the daemon on a shared database
    /// only (`daemon/recover.rs`).
    pub taken: Vec<(Run, Option<ShimIdentity>)>,
    /// Runs whose row the database does not hold as active here (another program ended it, or
    /// queued it again) while a live shim here still holds their lock, under the claim its
    /// `started` record names: the row as read, with that claim's token. Left alone (which side
    /// is wrong is for an operator, with `fleet check`), but held in the slot pool until the
    /// shim lets the lock go: its command runs, and takes its seat under every cap whatever
    /// the row says. Filled by [`unrecorded`].
    pub held: Vec<(Run, ShimIdentity)>,
}

/// Settles each of `runs` (active runs a previous daemon left, or that an outage left unsure)
/// from its run files (blocking: reads them, and writes tombstones). `boots` says of each claim whether the machine may have restarted since
/// it was made ([`Boots::start_survives`]).
pub fn settle_runs(runs: &[Run], state_dir: &Path, boots: &Boots) -> Found {
    let mut adopt = Vec::new();
    let mut transitions = Vec::new();
    let mut settled = Vec::new();
    let mut unsettled = Vec::new();
    let mut orphaned = Vec::new();
    for run in runs {
        let dir = RunFiles::new(state_dir, run.id);
        // The command's pid as the database recorded it: what names its process group when
        // the files no longer do (removed or overwritten by hand).
        let fate = match settle::settle(
            &dir,
            run.claim_token,
            settle::recorded_pgid(run),
            boots.start_survives(run.epoch),
        ) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(run = run.id, project = %run.project, error = %e, "cannot read or write the run's files; leaving it active");
                unsettled.push((run.id, run.claim_token));
                continue;
            }
        };
        if let Fate::Orphaned { pgid, session } = fate {
            orphaned.push((run.clone(), pgid, session));
            continue;
        }
        if fate == Fate::Alive {
            let started = dir
                .read_started()
                .ok()
                .flatten()
                .filter(|s| s.token == run.claim_token);
            if run.status == RunStatus::Starting {
                if let Some(r) = dir
                    .read_running()
                    .ok()
                    .flatten()
                    .filter(|r| r.token == run.claim_token)
                {
                    transitions.push(Transition {
                        run_id: run.id,
                        token: run.claim_token,
                        change: store::Change::Running { pid: Some(r.pid) },
                    });
                }
            }
            let shim = started.map(|s| ShimIdentity {
                pid: s.shim_pid,
                start_time: s.shim_start_time,
            });
            adopt.push((run.clone(), shim));
            continue;
        }
        settled.push((run.clone(), fate));
    }
    Found {
        adopt,
        transitions,
        settled,
        unsettled,
        orphaned,
        taken: Vec::new(),
        held: Vec::new(),
    }
}

/// What a live shim here holds that the database does not hold as active here.
pub enum Unrecorded {
    /// A run whose row can be read (as read), with the claim token the shim's `started`
    /// record names and the shim: its seats are held ([`Found::held`]) or, on a shared
    /// database, it may be a run a forget took from this host ([`Found::taken`]).
    Row(Box<Run>, u64, ShimIdentity),
    /// A run the database does not know (or whose row cannot be read), or whose shim has not
    /// written `started`: nothing can say which caps it counts against; only reported.
    Unknown(RunId),
}

/// The runs with files under `state_dir` whose lock a live shim holds although the database
/// does not hold them as active here (`active_ids`), each with its row when it can be read.
/// Recovery looks for them before the first claim: a command still running counts against
/// the caps, whatever its row says. A folder that cannot be listed, or a lock that cannot be
/// probed, is logged (not "no shims": unread) and left out.
///
/// Blocking (lock probes, file reads and database reads). Errors: the database's.
pub fn unrecorded(
    store: &store::Store,
    state_dir: &Path,
    active_ids: &std::collections::BTreeSet<RunId>,
) -> Result<Vec<Unrecorded>, store::StoreError> {
    let ids = match runrecord::live_run_candidates(state_dir) {
        Ok(ids) => ids,
        Err(e) => {
            let runs = state_dir.join(runrecord::RUNS_DIR);
            tracing::warn!(error = %e, path = %runs.display(), "cannot list the run files; shims the database does not know of go unreported");
            return Ok(Vec::new());
        }
    };
    let mut found = Vec::new();
    for id in ids.into_iter().filter(|id| !active_ids.contains(id)) {
        let files = RunFiles::new(state_dir, id);
        match files.is_locked() {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(run = id, error = %e, "cannot probe the run's lock; left alone (see `fleet check`)");
                continue;
            }
        }
        let Some(started) = files.read_started().ok().flatten() else {
            found.push(Unrecorded::Unknown(id));
            continue;
        };
        let run = match store.get_run(id) {
            Ok(run) => run,
            Err(store::StoreError::UnknownRun(_)) => {
                found.push(Unrecorded::Unknown(id));
                continue;
            }
            // A row another program left unreadable: which caps its command counts against
            // cannot be told either, and it must not hold recovery (and every claim) back.
            Err(e) if e.is_refused_row() => {
                tracing::warn!(run = id, error = %e, "the row of a run a live shim holds cannot be read");
                found.push(Unrecorded::Unknown(id));
                continue;
            }
            Err(e) => return Err(e),
        };
        let shim = ShimIdentity {
            pid: started.shim_pid,
            start_time: started.shim_start_time,
        };
        found.push(Unrecorded::Row(Box::new(run), started.token, shim));
    }
    Ok(found)
}

/// The transitions (with retries, per `config`, due from `now`) of the runs recovery settled.
pub fn transitions(config: &Config, settled: Vec<(Run, Fate)>, now: Millis) -> Vec<Transition> {
    let mut transitions = Vec::new();
    for (run, fate) in settled {
        let policy = RetryPolicy::for_project(config, &run.project);
        transitions.extend(settle::transition(
            run.id,
            run.claim_token,
            run.attempt,
            &fate,
            policy,
            now,
        ));
    }
    transitions
}

/// The slot of a run recovery takes over from a previous daemon (adopted, or orphaned with no
/// `shim`).
pub fn adopted_slot(run: &Run, shim: Option<ShimIdentity>) -> Slot {
    Slot {
        run_id: run.id,
        project: run.project.clone(),
        namespace: run.namespace.clone(),
        token: run.claim_token,
        attempt: run.attempt,
        shim,
        command_pid: settle::recorded_pgid(run),
        cancel_sent: false,
        shim_moved_on: false,
        adopted: true,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use runrecord::{RunLock, StartedRecord};
    use store::{NewRun, Store};

    use super::*;

    fn enqueue(store: &Store) -> RunId {
        let new = NewRun {
            project: "web".into(),
            namespace: "default".into(),
            ..NewRun::default()
        };
        store.enqueue(&new, 1).expect("enqueue")
    }

    /// Run `id`'s lock, taken as its shim takes it, with the `started` record of claim `token`
    /// written when there is one.
    fn shim_of(state_dir: &Path, id: RunId, token: Option<u64>) -> RunLock {
        let files = RunFiles::new(state_dir, id);
        files.create_runs_dir().expect("runs dir");
        let lock = files.try_lock().expect("lock").expect("free");
        if let Some(token) = token {
            let started = StartedRecord {
                token,
                shim_pid: 40 + id as i32,
                shim_start_time: 5,
                at: "2026-01-01T00:00:00.000Z".into(),
                history: Vec::new(),
            };
            files.write_started(&lock, &started).expect("started");
        }
        lock
    }

    /// Recovery's look for live shims the database does not hold as active: a run whose lock a
    /// shim holds comes back with its row and the claim its `started` record names; the runs
    /// the database holds as active, and those whose lock nobody holds, do not; a shim whose
    /// run the database does not know or cannot read, or that has not written `started`, is
    /// only named (and recovery goes on).
    #[test]
    fn unrecorded_finds_the_live_shims_of_runs_not_active_here() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path();
        let store = Store::open(&state.join("fleet.db"), Duration::from_secs(5)).expect("store");
        let ended = enqueue(&store);
        let active = enqueue(&store);
        let gone = enqueue(&store);
        let unstarted = enqueue(&store);
        let unreadable = enqueue(&store);
        let unknown = 99;
        let _held = [
            shim_of(state, ended, Some(9)),
            shim_of(state, active, Some(3)),
            shim_of(state, unstarted, None),
            shim_of(state, unknown, Some(4)),
            shim_of(state, unreadable, Some(6)),
        ];
        // Another program writes a value fleet cannot read into one row.
        rusqlite::Connection::open(state.join("fleet.db"))
            .expect("open")
            .execute(
                "UPDATE runs SET args = 'not json' WHERE id = ?1",
                [unreadable],
            )
            .expect("update");
        drop(shim_of(state, gone, Some(5)));
        let active_ids = BTreeSet::from([active]);
        let found = unrecorded(&store, state, &active_ids).expect("unrecorded");
        let mut rows = Vec::new();
        let mut named = Vec::new();
        for f in found {
            match f {
                Unrecorded::Row(run, token, shim) => rows.push((run.id, token, shim.pid)),
                Unrecorded::Unknown(id) => named.push(id),
            }
        }
        assert_eq!(rows, [(ended, 9, 40 + ended as i32)]);
        assert_eq!(named, [unstarted, unreadable, unknown]);
    }
}
