//! Writing what an EVAL reaped when the database refuses a row of it — a constraint or a
//! trigger another program put on its tables — and trying a refused transition again later.
//!
//! The EVAL writes its transitions in one transaction ([`super::eval`]); a refused row fails
//! that transaction whole, and retried as it was it would fail every EVAL after it: no end
//! written, nothing claimed, for every project. So after a refusal the batch is written one
//! transition at a time ([`apply_each`]): a refused end loses what it adds (its retry, then its
//! failure hook's run), and an end refused even alone waits in [`Supervised::refused`](super::state::Supervised::refused), its run
//! still active and counted against every cap, until a growing wait is over. This module
//! decides nothing about runs: the transitions are the reap's, the writes the store's.
//!
//! A claim the database refuses (the same kind of constraint or trigger) leaves its run queued:
//! the rest of the claims go on, and [`ClaimBackoff`] holds that run out of the packing for a
//! growing wait, so that it neither takes a seat another run could use nor is asked for, and
//! warned about, at every EVAL.

use std::collections::BTreeMap;

use config::Config;
use packer::RunningSet;
use store::{Applied, Millis, QueueHead, RunId, RunStatus, Store, StoreError, Transition};
use tokio::time::Instant;

#[cfg(test)]
use super::state::refused::REFUSED_RETRY_FIRST;
use super::state::refused::{refused_backoff, ClaimBackoff, Refused};
use crate::backoff::Backoff;

/// Leaves out of `heads` the runs `claim_backoff` holds at `now`, and puts in their place the
/// next queued runs of their projects that it does not hold (as many as the project has free
/// seats in `running`): a run the database refuses must not stall the runs queued behind it in
/// its project. One extra query per project whose only candidates were held.
pub(super) fn behind_held(
    store: &Store,
    config: &Config,
    running: &RunningSet,
    heads: &mut Vec<QueueHead>,
    claim_backoff: &ClaimBackoff,
    now: Millis,
) -> Result<(), StoreError> {
    let mut stalled: Vec<String> = heads
        .iter()
        .filter(|h| claim_backoff.holds(h.run_id, now))
        .map(|h| h.project.clone())
        .collect();
    heads.retain(|h| !claim_backoff.holds(h.run_id, now));
    stalled.sort_unstable();
    stalled.dedup();
    stalled.retain(|p| !heads.iter().any(|h| h.project == *p));
    for project in stalled {
        let Some(p) = config.projects.get(&project) else {
            continue;
        };
        let free = (p.max_parallel as usize).saturating_sub(running.count_of(&project));
        if free == 0 {
            continue;
        }
        // Past every held run of the project, at most, to the ones behind them.
        let limit = free + claim_backoff.len();
        let next = store.queue_of(&project, now, limit as u32)?;
        heads.extend(
            next.into_iter()
                .filter(|h| !claim_backoff.holds(h.run_id, now))
                .take(free),
        );
    }
    Ok(())
}

/// Moves the refused transitions whose wait is over into `batch`; returns the back-off of
/// each (its refusals in a row), for [`keep_refused`](super::refused::keep_refused).
pub(super) fn take_due_refused(
    refused: &mut BTreeMap<RunId, Refused>,
    batch: &mut Vec<Transition>,
) -> BTreeMap<RunId, Backoff<Instant>> {
    let now = Instant::now();
    let due: Vec<RunId> = refused
        .iter()
        .filter(|(_, r)| r.retry.is_due(now))
        .map(|(id, _)| *id)
        .collect();
    let mut retried = BTreeMap::new();
    for id in due {
        if let Some(r) = refused.remove(&id) {
            retried.insert(id, r.retry);
            batch.push(r.transition);
        }
    }
    retried
}

/// Keeps `refused` (refused again, or for the first time: `retried` holds the back-off of
/// those refused before) until a wait of 1 s, doubling with each refusal in a row up to a
/// minute, is over. A back-off per run: each run's refusals in a row are its own.
pub(super) fn keep_refused(
    kept: &mut BTreeMap<RunId, Refused>,
    metrics: &fleet_http::Metrics,
    refused: Vec<Transition>,
    retried: &BTreeMap<RunId, Backoff<Instant>>,
) {
    for t in refused {
        let mut retry = retried.get(&t.run_id).copied().unwrap_or(refused_backoff());
        retry.fail(Instant::now());
        kept.insert(
            t.run_id,
            Refused {
                transition: t,
                retry,
            },
        );
    }
    metrics.refused_transitions(kept.len());
}

/// When the next refused transition is to be tried again, for the loop's timer.
pub(super) fn refused_due(refused: &BTreeMap<RunId, Refused>) -> Option<Instant> {
    refused.values().filter_map(|r| r.retry.due()).min()
}

/// Transitions written, each with what it did.
pub(super) type Written = (Vec<Transition>, Vec<Applied>);

/// Writes `batch` one transition at a time, after the database refused a row of the batch
/// written whole (a constraint or a trigger another program put on it): the runs it does not
/// refuse are written, and one run's refusal never holds up every other end and claim.
///
/// A refused end is written again without what it adds: first without its retry, then
/// without its failure hook's run — the end itself is what the run's exit status licenses,
/// and a lost end would keep its seat taken for good; each is logged at ERROR naming the run.
/// An end refused even so stays unwritten (pushed on `refused`: the run keeps its seat, as the
/// database still holds it active) and is tried again later ([`Refused`]).
///
/// Returns the transitions written and what each did, and, after an error that is not a
/// refusal (the database busy, unreachable, this daemon fenced), that error and every
/// transition not yet written: the ones before it stay written.
pub(super) fn apply_each(
    store: &Store,
    epoch: i64,
    batch: Vec<Transition>,
    hooks: &store::FailureHooks,
    now: Millis,
    refused: &mut Vec<Transition>,
) -> (Written, Option<(StoreError, Vec<Transition>)>) {
    let mut written = Vec::new();
    let mut applied = Vec::new();
    let mut rest = batch.into_iter();
    while let Some(t) = rest.next() {
        let is_end = matches!(t.change, store::Change::Finish { .. });
        let has_retry = matches!(t.change, store::Change::Finish { retry: Some(_), .. });
        // What an end the database refuses is written without, step by step: (what is
        // dropped, whether the retry is, whether the hook's run is).
        let mut steps = vec![("", false, false)];
        if has_retry {
            steps.push(("its retry", true, false));
        }
        if is_end && !hooks.is_empty() {
            let what = if has_retry {
                "its retry and its failure hook's run"
            } else {
                "its failure hook's run"
            };
            steps.push((what, has_retry, true));
        }
        let mut refusal: Option<StoreError> = None;
        for (dropped, no_retry, no_hooks) in steps {
            let attempt = match &refusal {
                None => t.clone(),
                Some(e) => without(&t, no_retry, dropped, e),
            };
            let step_hooks = if no_hooks {
                store::FailureHooks::new()
            } else {
                hooks.clone()
            };
            match store.apply_with_hooks(epoch, std::slice::from_ref(&attempt), &step_hooks, now) {
                Ok(mut a) => {
                    if let Some(e) = &refusal {
                        tracing::error!(
                            run = t.run_id,
                            project = %project_of(store, t.run_id),
                            error = %e,
                            "the database refused this run's end with {dropped}; its end is written without {}",
                            if no_retry && no_hooks { "them" } else { "it" }
                        );
                    }
                    written.push(attempt);
                    applied.append(&mut a);
                    refusal = None;
                    break;
                }
                Err(e) if e.is_refused_row() => refusal = Some(e),
                Err(e) => {
                    let mut unwritten = vec![t];
                    unwritten.extend(rest);
                    return ((written, applied), Some((e, unwritten)));
                }
            }
        }
        if let Some(e) = refusal {
            tracing::error!(
                run = t.run_id,
                project = %project_of(store, t.run_id),
                to = target(&t.change),
                error = %e,
                "the database refused this run's transition; it is tried again later (after 1 s, doubling up to a minute), and the run keeps its seat meanwhile"
            );
            refused.push(t);
        }
    }
    ((written, applied), None)
}

/// `t`, an end, without its retry (`no_retry`), its note saying what was not queued and why
/// (`dropped`, refused as `e`), so that the run's history keeps it, not only the log.
fn without(t: &Transition, no_retry: bool, dropped: &str, e: &StoreError) -> Transition {
    let mut t = t.clone();
    if let store::Change::Finish { retry, reason, .. } = &mut t.change {
        if no_retry {
            *retry = None;
        }
        let them = if dropped.contains(" and ") {
            "them"
        } else {
            "it"
        };
        let note = format!("{dropped} not queued: the database refused {them} ({e})");
        *reason = Some(match reason.take() {
            Some(r) => format!("{r}; {note}"),
            None => note,
        });
    }
    t
}

/// The status a transition writes, for the log.
fn target(change: &store::Change) -> &'static str {
    match change {
        store::Change::Running { .. } => RunStatus::Running.as_str(),
        store::Change::Finish { status, .. } => status.as_str(),
        store::Change::Requeue { .. } => RunStatus::Queued.as_str(),
    }
}

/// Run `id`'s project, for a log line on a rare path; `?` when it cannot be read.
fn project_of(store: &Store, id: RunId) -> String {
    store
        .get_run(id)
        .map_or_else(|_| "?".to_string(), |r| r.project)
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::Change;

    fn end(run_id: RunId) -> Transition {
        Transition {
            run_id,
            token: 7,
            change: Change::Running { pid: Some(1) },
        }
    }

    /// A refused transition waits its own back-off: kept out of the batch until due, taken
    /// back into it with its refusals so far once due, so that a refusal in a row doubles the
    /// wait.
    #[test]
    fn a_refused_transition_waits_its_own_doubling_back_off() {
        let metrics = fleet_http::Metrics::new();
        let mut kept = BTreeMap::new();
        keep_refused(&mut kept, &metrics, vec![end(1)], &BTreeMap::new());
        assert_eq!(kept[&1].retry.wait(), Some(REFUSED_RETRY_FIRST));
        assert!(refused_due(&kept).is_some_and(|at| at > Instant::now()));
        let mut batch = Vec::new();
        assert!(take_due_refused(&mut kept, &mut batch).is_empty());
        assert!(batch.is_empty(), "not before its wait is over");

        // Its wait over (made due here rather than waited out):
        let mut due = kept[&1].retry;
        due.reset();
        due.fail(Instant::now() - REFUSED_RETRY_FIRST * 4);
        kept.get_mut(&1).expect("kept").retry = due;
        let retried = take_due_refused(&mut kept, &mut batch);
        assert_eq!(batch, vec![end(1)]);
        assert!(kept.is_empty());
        // Refused again: the next wait is twice the first.
        keep_refused(&mut kept, &metrics, batch, &retried);
        assert_eq!(kept[&1].retry.wait(), Some(REFUSED_RETRY_FIRST * 2));
    }
}
