//! The retry policy: whether a run that ended gets another attempt, and when.
//!
//! Pure: it reads no clock (the caller passes `now`) and writes nothing; the instant it returns
//! becomes the retry's not-before in the database, where the EVAL finds it. It must never make a
//! retry come sooner than the configured backoff.

use config::Config;
use store::{Millis, RunStatus};

/// What the retry policy needs to know about a run's project.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Extra attempts allowed after the first (`retries` in fleet.toml); 0 when the project is
    /// no longer configured.
    pub retries: u32,
    /// Base of the exponential backoff, in milliseconds (`retry_backoff`).
    pub backoff_ms: u64,
}

impl RetryPolicy {
    /// No retry at all: the policy of a project that is not in the config.
    pub const NONE: RetryPolicy = RetryPolicy {
        retries: 0,
        backoff_ms: 0,
    };

    /// The policy of `project` in `config`; a project no longer configured gets no retry.
    pub fn for_project(config: &Config, project: &str) -> RetryPolicy {
        match config.projects.get(project) {
            Some(p) => RetryPolicy {
                retries: p.retries,
                backoff_ms: p.retry_backoff.as_millis() as u64,
            },
            None => RetryPolicy::NONE,
        }
    }

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
