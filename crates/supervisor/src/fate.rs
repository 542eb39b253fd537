//! Deciding what became of one claim of a run, from its run files — the one place that does it,
//! used both when a shim this daemon spawned exits and by startup recovery.
//!
//! The decision follows the restart contract:
//! - the shim still holds the run's lock ⇒ it is alive: keep (or adopt) it;
//! - lock free and an exit record for this claim ⇒ the run ended: record its real status;
//! - lock free, no started record for this claim ⇒ the command provably never started: leave a
//!   tombstone (while holding the lock) and requeue, same attempt. The tombstone is what stops a
//!   shim that was spawned but had not yet taken the lock from starting the run later;
//! - lock free, started, no exit record ⇒ the command may have run; its fate is unknown: `lost`.

use std::io;

use store::{Change, Millis, RunStatus, Transition};

use crate::runfiles::{ExitRecord, Outcome, RunDir};

/// What the run files say about one claim of a run.
#[derive(Clone, Debug, PartialEq)]
pub enum Fate {
    /// The shim holds the lock: the run is in flight.
    Alive,
    /// The command ended and its shim recorded how.
    Ended(ExitRecord),
    /// The command never started; a tombstone now bars any late shim of this claim.
    NeverStarted,
    /// The command may have started, and nothing recorded its end.
    Lost,
}

/// Reads (and, for a claim that never started, tombstones) the run files of `token`'s claim.
///
/// Errors: I/O errors on the run directory. A corrupt exit or started record counts as missing
/// (so a corrupt exit record gives `Lost`, never a made-up status).
pub fn settle(dir: &RunDir, token: u64) -> io::Result<Fate> {
    let Some(lock) = dir.try_lock()? else {
        return Ok(Fate::Alive);
    };
    if let Ok(Some(exit)) = dir.read_exit() {
        if exit.token == token {
            return Ok(Fate::Ended(exit));
        }
    }
    let started = matches!(dir.read_started(), Ok(Some(s)) if s.token == token);
    if started {
        return Ok(Fate::Lost);
    }
    fail::fail_point!("recovery-before-tombstone", |_| std::process::abort());
    dir.write_tombstone(&lock, token)?;
    fail::fail_point!("recovery-after-tombstone", |_| std::process::abort());
    Ok(Fate::NeverStarted)
}

/// The terminal status, exit code, signal and reason an exit record stands for.
///
/// `term_requested` means the daemon sent SIGTERM for a cancel (timeouts are the shim's own and
/// say `timed_out`), so such a run ends `cancelled` whatever its exit code; its reason is the
/// one recorded with the request.
pub fn outcome(exit: &ExitRecord) -> (RunStatus, Option<i32>, Option<i32>, Option<String>) {
    match exit.outcome {
        Outcome::SpawnFailed => (
            RunStatus::Failed,
            None,
            None,
            Some(
                exit.error
                    .clone()
                    .unwrap_or_else(|| "the command could not be started".into()),
            ),
        ),
        _ if exit.timed_out => (
            RunStatus::TimedOut,
            exit.code,
            exit.signal,
            Some("timeout expired".into()),
        ),
        // The reason was written with the request ("cancelled by operator", "replaced by the
        // occurrence at …"), and stays.
        _ if exit.term_requested => (RunStatus::Cancelled, exit.code, exit.signal, None),
        Outcome::Exited if exit.code == Some(0) => (RunStatus::Succeeded, Some(0), None, None),
        Outcome::Exited => (RunStatus::Failed, exit.code, None, None),
        Outcome::Signalled => (
            RunStatus::Failed,
            None,
            exit.signal,
            Some(format!("killed by signal {}", exit.signal.unwrap_or(0))),
        ),
    }
}

/// What the retry policy needs to know about a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Extra attempts allowed after the first (`retries` in fleet.toml); 0 when the project is
    /// no longer configured.
    pub retries: u32,
    /// Base of the exponential backoff, in milliseconds (`retry_backoff`).
    pub backoff_ms: u64,
}

impl RetryPolicy {
    /// The instant the next attempt may start, if attempt `attempt` (1-based) that ended with
    /// `status` gets one: only `failed`, `timed_out` and `lost` are retried, and only while
    /// attempts remain. The wait is `backoff_ms · 2^(attempt-1)`, capped at one hour, plus a
    /// jitter of up to a quarter of it — so that runs that failed together (a shared outage)
    /// do not all come back in the same instant. The jitter only adds: a retry never comes
    /// sooner than the backoff says.
    pub fn next(&self, status: RunStatus, attempt: u32, now: Millis) -> Option<Millis> {
        let retryable = matches!(
            status,
            RunStatus::Failed | RunStatus::TimedOut | RunStatus::Lost
        );
        if !retryable || attempt > self.retries {
            return None;
        }
        let factor = 1u64 << (attempt - 1).min(20);
        let wait = self.backoff_ms.saturating_mul(factor).min(3_600_000);
        let jitter = if wait >= 4 {
            splitmix(now as u64 ^ u64::from(attempt)) % (wait / 4 + 1)
        } else {
            0
        };
        Some(now + (wait + jitter) as Millis)
    }
}

/// A well-mixed hash of `x` (splitmix64's finalizer): a cheap source of jitter that needs no
/// random-number generator.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The database transition for a settled fate; `None` for [`Fate::Alive`].
pub fn transition(
    run_id: store::RunId,
    token: u64,
    attempt: u32,
    fate: &Fate,
    policy: RetryPolicy,
    now: Millis,
) -> Option<Transition> {
    let change = match fate {
        Fate::Alive => return None,
        Fate::NeverStarted => Change::Requeue {
            reason: "the command never started; queued again, same attempt".into(),
        },
        Fate::Lost => Change::Finish {
            status: RunStatus::Lost,
            exit_code: None,
            signal: None,
            reason: Some("the shim died without recording the command's end".into()),
            retry: policy.next(RunStatus::Lost, attempt, now),
            finished_at: None,
        },
        Fate::Ended(exit) => {
            let (status, exit_code, signal, reason) = outcome(exit);
            Change::Finish {
                status,
                exit_code,
                signal,
                reason,
                retry: policy.next(status, attempt, now),
                finished_at: exit.finished_ms(),
            }
        }
    };
    Some(Transition {
        run_id,
        token,
        change,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_only_retryable_statuses_while_attempts_remain() {
        let p = RetryPolicy {
            retries: 2,
            backoff_ms: 1000,
        };
        let first = p.next(RunStatus::Failed, 1, 0).unwrap();
        assert!((1000..=1250).contains(&first), "{first}");
        let second = p.next(RunStatus::TimedOut, 2, 0).unwrap();
        assert!((2000..=2500).contains(&second), "{second}");
        assert_eq!(p.next(RunStatus::Lost, 3, 0), None);
        assert_eq!(p.next(RunStatus::Succeeded, 1, 0), None);
        assert_eq!(p.next(RunStatus::Cancelled, 1, 0), None);
    }

    #[test]
    fn jitter_spreads_retries_but_never_shortens_the_backoff() {
        let p = RetryPolicy {
            retries: 1,
            backoff_ms: 10_000,
        };
        let waits: std::collections::BTreeSet<i64> = (0..100)
            .map(|now| p.next(RunStatus::Failed, 1, now).unwrap() - now)
            .collect();
        assert!(
            waits.iter().all(|w| (10_000..=12_500).contains(w)),
            "{waits:?}"
        );
        assert!(waits.len() > 50, "no jitter: {waits:?}");
    }
}
