//! What the HTTP listener may look at ([`Observed`]), fed by the daemon's loop and read by every
//! endpoint, and the answer when a database read through it fails ([`unavailable`]).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use config::Config;
use health::Health;
use store::Store;

use super::counters::Metrics;

/// The most relays to other hosts' listeners a daemon makes at once. Each holds a blocking
/// thread for up to [`super::remote::TIMEOUT`]; past this many, a request waits for one to
/// finish (a task, not a thread), so that however many viewers ask, the daemon's own blocking
/// work (its database calls) always finds a thread.
pub(super) const MAX_RELAYS: usize = 4;

/// What the HTTP listener may look at: shared between the daemon's loop, which feeds it, and
/// the listener, which reads it. Cheap to read; nothing in it waits for the loop.
pub struct Observed {
    /// The loop's heartbeat.
    pub health: Arc<Health>,
    /// The counters the loop feeds.
    pub metrics: Metrics,
    /// The daemon's epoch.
    pub epoch: i64,
    /// The daemon's pid.
    pub pid: u32,
    /// The database (read only, from here).
    pub(super) store: Store,
    /// The state directory (for run logs).
    pub(super) state_dir: PathBuf,
    /// The config in force, replaced at each applied reload.
    config: RwLock<Arc<Config>>,
    /// One database read of the listener at a time: the store's pool is shared with the loop,
    /// and however many requests arrive, the listener holds at most one of its connections, so
    /// an EVAL never waits for a connection a scrape or a dashboard holds.
    reads: tokio::sync::Semaphore,
    /// Relays to other hosts' listeners under way (see [`MAX_RELAYS`]): each holds a
    /// blocking thread for up to a few seconds, and a slow host must not take them all.
    pub(super) relays: tokio::sync::Semaphore,
}

impl Observed {
    /// The record for a daemon of `epoch` with this `health`, database, state directory and
    /// config in force.
    pub fn new(
        health: Arc<Health>,
        epoch: i64,
        store: Store,
        state_dir: PathBuf,
        config: Arc<Config>,
    ) -> Observed {
        Observed {
            health,
            metrics: Metrics::new(),
            epoch,
            pid: std::process::id(),
            store,
            state_dir,
            config: RwLock::new(config),
            reads: tokio::sync::Semaphore::new(1),
            relays: tokio::sync::Semaphore::new(MAX_RELAYS),
        }
    }

    /// The config in force changed (an applied reload).
    pub fn set_config(&self, config: Arc<Config>) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Runs `read` (database or file reads) on a blocking thread, one at a time (see
    /// [`Observed::reads`]). Errors: the closure panicked.
    pub(super) async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        read: impl FnOnce(&Observed) -> T + Send + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        // The semaphore is never closed, so acquiring only waits.
        let _permit = self.reads.acquire().await;
        let o = self.clone();
        tokio::task::spawn_blocking(move || read(&o)).await
    }
}

/// 503 with the error, for a database read that failed (busy, gone).
pub(super) fn unavailable(e: &dyn std::fmt::Display) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("the database could not be read: {e}\n"),
    )
        .into_response()
}
