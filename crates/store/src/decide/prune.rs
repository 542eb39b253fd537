//! Which ended runs a prune may take: the walk over the projects and the two kinds of runs
//! (started, never started) that turns a [`PrunePolicy`] into [`PruneCandidate`]s.
//!
//! The rule lives here once; a backend supplies only the three index reads it is built from
//! ([`PruneReads`]), each one SQL statement of its dialect. Nothing here may read anything but
//! through those reads, nor write: selection never takes a write lock.

use crate::error::Result;
use crate::prune::{PruneCandidate, PrunePolicy};
use crate::{Millis, RunId};

/// One query for the runs of a project a prune lets go, for [`PruneReads::let_go`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct LetGo<'a> {
    /// The project.
    pub(crate) project: &'a str,
    /// Only runs below this id (the project's newest started run is never let go).
    pub(crate) below: RunId,
    /// Only runs that finished before this instant (ms UTC): the policy's grace.
    pub(crate) ended_before: Millis,
    /// Runs below this id are let go by count (`newest = N`), if set.
    pub(crate) by_count: Option<RunId>,
    /// Runs that finished before this instant (ms UTC) are let go by age, if set.
    pub(crate) by_age: Option<Millis>,
    /// At most this many.
    pub(crate) limit: usize,
    /// Runs that started (`true`) or runs that never did (`false`).
    pub(crate) started: bool,
    /// Only runs this host ran (`runs.host`), if set; see [`PrunePolicy::host`].
    pub(crate) host: Option<&'a str>,
}

/// The index reads a backend supplies for [`candidates`], each over ended runs only.
pub(crate) trait PruneReads {
    /// The first project name above `after` that has any run, in name order.
    fn next_project(&mut self, after: &str) -> Result<Option<String>>;
    /// The id of the project's `n`-th newest ended run (`n` ≥ 1) among those that `started`
    /// (or never did); `None` when it has fewer.
    fn nth_newest(&mut self, project: &str, n: u32, started: bool) -> Result<Option<RunId>>;
    /// The ended runs [`LetGo`] names, oldest first, that no queued or active run refers to
    /// (as its hook's failed run, the attempt it retries, the run it repeats): such a run still
    /// reads their log and `fleet wait` follows the chain through them. With their
    /// `finished_at`.
    fn let_go(&mut self, q: &LetGo<'_>) -> Result<Vec<(RunId, Option<Millis>)>>;
}

/// Up to `limit` ended runs `policy` lets go, project by project.
///
/// Index walks only, so that its cost follows what is let go and the projects, never the
/// history kept. Runs that started and runs that never did (skips, cancels while queued) are
/// counted apart, so skips never push real outcomes out of history. The newest started run of a
/// project is never let go (its last outcome); of the runs that never started, nothing marks a
/// last one: no id bounds them. With `newest = N`: runs older than the N-th newest; fewer than
/// N: none by count. With [`PrunePolicy::host`] set (a shared database), the started runs let
/// go are only those that host ran; the counts stay fleet-wide (`newest = N` keeps the
/// project's newest N whoever ran them). Errors: any of the reads'.
pub(crate) fn candidates(
    reads: &mut impl PruneReads,
    policy: &PrunePolicy,
    limit: usize,
) -> Result<Vec<PruneCandidate>> {
    let mut out = Vec::new();
    let mut after = String::new();
    while out.len() < limit {
        let Some(project) = reads.next_project(&after)? else {
            break;
        };
        after.clone_from(&project);
        let keep = policy.keep_for(&project);
        if keep.keeps_all() {
            continue;
        }
        for started in [true, false] {
            if out.len() >= limit {
                break;
            }
            let below = if started {
                match reads.nth_newest(&project, 1, true)? {
                    Some(id) => id,
                    None => continue,
                }
            } else {
                RunId::MAX
            };
            let by_count = match keep.newest {
                Some(n) => reads.nth_newest(&project, n, started)?,
                None => None,
            };
            if by_count.is_none() && keep.finished_after.is_none() {
                continue;
            }
            let rows = reads.let_go(&LetGo {
                project: &project,
                below,
                ended_before: policy.ended_before,
                by_count,
                by_age: keep.finished_after,
                limit: limit - out.len(),
                started,
                // A started run's files are on the disk of the host that ran it: only that
                // host may let it go. A run that never started has no files anywhere.
                host: if started {
                    policy.host.as_deref()
                } else {
                    None
                },
            })?;
            out.extend(rows.into_iter().map(|(id, finished_at)| PruneCandidate {
                id,
                project: project.clone(),
                finished_at: finished_at.unwrap_or(0),
            }));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune::Keep;

    /// Two projects: `a` (newest started run 9) and `b`; records the let-go queries.
    #[derive(Default)]
    struct Fake {
        asked: Vec<String>,
    }

    impl PruneReads for Fake {
        fn next_project(&mut self, after: &str) -> Result<Option<String>> {
            Ok(match after {
                "" => Some("a".into()),
                "a" => Some("b".into()),
                _ => None,
            })
        }
        fn nth_newest(&mut self, _: &str, n: u32, started: bool) -> Result<Option<RunId>> {
            Ok(started.then_some(10 - RunId::from(n)))
        }
        fn let_go(&mut self, q: &LetGo<'_>) -> Result<Vec<(RunId, Option<Millis>)>> {
            self.asked.push(format!(
                "{} below {} by_count {:?} started {} host {:?}",
                q.project, q.below, q.by_count, q.started, q.host
            ));
            Ok(vec![(1, Some(5)), (2, None)])
        }
    }

    fn policy(a: Keep) -> PrunePolicy {
        let mut p = PrunePolicy {
            ended_before: 100,
            ..PrunePolicy::default()
        };
        p.projects.insert("a".into(), a);
        p
    }

    #[test]
    fn the_newest_started_run_bounds_what_is_let_go() {
        let mut f = Fake::default();
        let keep = Keep {
            newest: Some(3),
            finished_after: None,
        };
        let out = candidates(&mut f, &policy(keep), usize::MAX).unwrap();
        // `b` keeps everything (the default): never asked. Never-started runs of `a` have no
        // N-th newest here, and no age rule: none asked either.
        assert_eq!(
            f.asked,
            vec!["a below 9 by_count Some(7) started true host None".to_string()]
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].finished_at, 0);
    }

    #[test]
    fn the_limit_stops_the_walk() {
        let mut f = Fake::default();
        let keep = Keep {
            newest: None,
            finished_after: Some(50),
        };
        let out = candidates(&mut f, &policy(keep), 2).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(
            f.asked.len(),
            1,
            "the never-started runs are not read once full"
        );
    }
}
