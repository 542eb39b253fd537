//! What the daemon counts in memory as it works ([`Metrics`]): fed by the loop, exposed at
//! `/metrics` (`metrics.rs`).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use store::{Millis, Run};

/// What the daemon counts as it works, since it started. Cheap to update (atomics); the loop
/// updates it, scrapes read it.
pub struct Metrics {
    pub(super) registry: Registry,
    eval_duration: Histogram,
    schedule_lag: Histogram,
    claims: Counter,
    spawn_failures: Counter,
    busy_retries: Counter,
    refused_transitions: Gauge,
    refused_claims: Gauge,
}

impl Metrics {
    /// Fresh counters, registered under the `fleet_` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("fleet");
        // 1 ms to about 16 s.
        let eval_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        // 10 ms to about 20 min.
        let schedule_lag = Histogram::new(exponential_buckets(0.01, 2.0, 18));
        let claims = Counter::default();
        let spawn_failures = Counter::default();
        let busy_retries = Counter::default();
        let refused_transitions = Gauge::default();
        let refused_claims = Gauge::default();
        registry.register_with_unit(
            "eval_duration",
            "Wall time of one EVAL (reap, schedules, pack, claim, spawn)",
            Unit::Seconds,
            eval_duration.clone(),
        );
        registry.register_with_unit(
            "schedule_lag",
            "Time from a schedule occurrence to its run's claim",
            Unit::Seconds,
            schedule_lag.clone(),
        );
        registry.register(
            "claims",
            "Runs claimed (queued to starting) by this daemon",
            claims.clone(),
        );
        registry.register(
            "spawn_failures",
            "Claimed runs whose shim could not be started",
            spawn_failures.clone(),
        );
        registry.register(
            "database_busy_retries",
            "EVALs or recoveries that found the database busy and were retried later",
            busy_retries.clone(),
        );
        // Why: a run whose end the database refuses stays active, holding its seat, while the
        // daemon is healthy; an alert needs a series to fire on.
        registry.register(
            "refused_transitions",
            "Runs whose transition (an end, mostly) the database refuses even written alone, waiting to be tried again; each holds its seat meanwhile",
            refused_transitions.clone(),
        );
        // Why: a queued run whose claim the database refuses waits while everything else runs;
        // the log says it once per growing wait, and an alert needs a series.
        registry.register(
            "refused_claims",
            "Queued runs whose last claim the database refused (a constraint or a trigger), held back for a growing wait before they are asked for again",
            refused_claims.clone(),
        );
        Metrics {
            registry,
            eval_duration,
            schedule_lag,
            claims,
            spawn_failures,
            busy_retries,
            refused_transitions,
            refused_claims,
        }
    }

    /// `n` queued runs are held back after a refused claim (after each EVAL).
    pub fn refused_claims(&self, n: usize) {
        self.refused_claims
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// `n` runs' transitions wait, refused by the database (after each EVAL).
    pub fn refused_transitions(&self, n: usize) {
        self.refused_transitions
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// One EVAL took `took`.
    pub fn eval_took(&self, took: Duration) {
        self.eval_duration.observe(took.as_secs_f64());
    }

    /// Runs were claimed at `now` ([`Millis`]); those of schedule occurrences record their lag.
    pub fn claimed<'a>(&self, runs: impl IntoIterator<Item = &'a Run>, now: Millis) {
        for run in runs {
            self.claims.inc();
            if let Some(occurrence) = run.occurrence {
                let at = run.started_at.unwrap_or(now);
                self.schedule_lag
                    .observe((at - occurrence).max(0) as f64 / 1000.0);
            }
        }
    }

    /// A claimed run's shim could not be started.
    pub fn spawn_failed(&self) {
        self.spawn_failures.inc();
    }

    /// A database call found the database busy; the work is retried later.
    pub fn busy_retry(&self) {
        self.busy_retries.inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
