//! What an EVAL packs and claims: the queue heads the packers may pick from (more than one per
//! project with free seats) and the claim the database checks each pick against. No decision
//! is made here: the packers pick, the store claims.

use config::Config;
use packer::{Candidate, Caps, RunningSet};
use store::{ClaimRequest, Millis, QueueHead, Store, StoreError};

/// Adds to `heads` the next queued runs of each project with more than one free seat
/// (`max_parallel` above its active runs in `running`), so that such a project can start as many
/// runs in one EVAL as it has free seats. One extra query per such project; a project with one
/// seat (the default) costs nothing here.
pub(super) fn more_heads(
    store: &Store,
    config: &Config,
    running: &RunningSet,
    heads: &mut Vec<QueueHead>,
    now: Millis,
) -> Result<(), StoreError> {
    let mut extra = Vec::new();
    for head in heads.iter() {
        let Some(project) = config.projects.get(&head.project) else {
            continue;
        };
        let free = (project.max_parallel as usize).saturating_sub(running.count_of(&head.project));
        if free > 1 {
            let more = store.queue_of(&head.project, now, free as u32)?;
            extra.extend(more.into_iter().filter(|m| m.run_id != head.run_id));
        }
    }
    heads.extend(extra);
    Ok(())
}

/// The queue heads the packers may pick from: those of projects in `config`, each counted
/// against the namespace the config gives it now (not the one recorded at enqueue).
pub(super) fn candidates(heads: Vec<QueueHead>, config: &Config) -> Vec<Candidate> {
    heads
        .into_iter()
        .filter_map(|h| {
            let project = config.projects.get(&h.project)?;
            Some(Candidate {
                run_id: h.run_id,
                project: h.project,
                namespace: project.namespace.clone(),
                priority: h.priority,
            })
        })
        .collect()
}

/// The claims for the packers' picks, each carrying the caps the database checks it against
/// (the namespace cap only when the config declares namespaces; the project's `max_parallel`).
pub(super) fn claim_requests(
    picks: &[Candidate],
    caps: &Caps,
    config: &Config,
    config_version: Option<i64>,
) -> Vec<ClaimRequest> {
    picks
        .iter()
        .map(|c| ClaimRequest {
            run_id: c.run_id,
            namespace: c.namespace.clone(),
            global_cap: caps.global as u32,
            namespace_cap: if caps.namespaces.is_empty() {
                None
            } else {
                caps.namespaces
                    .get(&c.namespace)
                    .map(|n| n.max_concurrency as u32)
            },
            max_parallel: config.max_parallel(&c.project),
            host_cap: config.host_capacity(&config.host).map(|c| c as u32),
            config_version,
        })
        .collect()
}
