//! The end of a simulation: the faults stop and time passes until every run has ended
//! (liveness), then the checks of the whole history.

use rand::Rng;
use store::{HoldKind, RunFilter, RunId, RunStatus};

use crate::{Failure, Sim};

/// How many drain steps (a second each) may pass with no run ended before the drain is judged
/// stuck: more than a retry's longest back-off (an hour).
const DRAIN_PATIENCE: u32 = 4_000;

impl Sim {
    /// The faults stop, every pause is lifted, the schedule is taken out and time passes:
    /// every run must end.
    ///
    /// Errors: a violation found meanwhile, or no run ended for [`DRAIN_PATIENCE`] steps.
    pub(crate) fn drain(&mut self) -> Result<(), Failure> {
        self.foreign_lets_go(true)?;
        for host in &mut self.hosts {
            host.down = false;
        }
        self.shape.schedule = None;
        self.write_configs()?;
        for (namespace, name) in std::mem::take(&mut self.paused) {
            let kind = if namespace {
                HoldKind::Namespace
            } else {
                HoldKind::Project
            };
            self.store
                .resume(kind, &name)
                .map_err(|e| self.violation(format!("a resume failed: {e}")))?;
        }
        // However long the queue has grown, it must keep going down: a drain fails once no run
        // has ended for longer than any wait fleet may impose (a retry's back-off is at most an
        // hour), with time passing a second a step.
        let mut open = u64::MAX;
        let mut since_progress = 0;
        while since_progress < DRAIN_PATIENCE {
            self.step += 1;
            for h in 0..self.hosts.len() {
                self.eval(h, false, false)?;
            }
            for (h, pid) in self.live_shims() {
                let code = if self.rng.gen_bool(0.8) { 0 } else { 1 };
                self.advance_shim(h, pid, code)?;
            }
            self.now += 1_000;
            let waiting = self
                .hosts
                .iter()
                .any(|host| host.daemon.as_ref().is_some_and(|d| d.has_work()));
            let now_open = self.open_count()?;
            if now_open == 0 && self.live_shims().is_empty() && !waiting {
                return Ok(());
            }
            if now_open < open {
                open = now_open;
                since_progress = 0;
            } else {
                since_progress += 1;
            }
        }
        let open = self.open_runs()?;
        Err(self.violation(format!(
            "liveness: with no fault and time passing, these runs never ended: {}",
            describe(&open)
        )))
    }

    /// How many runs have not ended yet: counted by status (an index), never listed, since
    /// the drain asks at every turn and a long simulation's history is large.
    fn open_count(&self) -> Result<u64, Failure> {
        let mut n = 0;
        for status in [RunStatus::Queued, RunStatus::Starting, RunStatus::Running] {
            n += self
                .store
                .count_runs(status)
                .map_err(|e| self.violation(format!("the runs could not be counted: {e}")))?;
        }
        Ok(n)
    }

    /// The runs not yet ended, with their status.
    fn open_runs(&self) -> Result<Vec<(RunId, RunStatus)>, Failure> {
        let runs = self
            .store
            .list_runs(&RunFilter {
                statuses: vec![RunStatus::Queued, RunStatus::Starting, RunStatus::Running],
                ..RunFilter::default()
            })
            .map_err(|e| self.violation(format!("the runs could not be listed: {e}")))?;
        Ok(runs.into_iter().map(|r| (r.id, r.status)).collect())
    }
}

fn describe(runs: &[(RunId, RunStatus)]) -> String {
    runs.iter()
        .take(10)
        .map(|(id, s)| format!("run {id} ({s})"))
        .collect::<Vec<_>>()
        .join(", ")
}
