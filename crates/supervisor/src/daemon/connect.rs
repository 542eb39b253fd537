//! Opening the store at daemon start. A PostgreSQL server that cannot be reached yet (it is
//! still starting, the network is not up, it is being restarted) is waited for: the daemon logs
//! each failed try and tries again with a growing pause, and claims nothing meanwhile. It holds
//! the state directory's lock while it waits, so no second daemon starts here in its place.
//! Anything else (a schema newer than this fleet, an unusable state directory) ends the start.
//! So does SIGTERM or SIGINT during a pause between tries: a daemon that never reached its
//! database has nothing to finish, and an operator stopping it must not have to wait for one.

use std::time::Duration;

use store::{Store, StoreError};

use super::listener::Signals;
use crate::backoff::Backoff;
use crate::statedir::{StateDir, StateDirError};

/// The first pause after a failed connection; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// Opens `state`'s store, retrying for as long as it takes while the database cannot be
/// reached (never for SQLite, whose file is local: its errors are returned at once). `None`
/// when a stop signal came during a pause between tries (a try in progress is not cut short:
/// the driver's connect timeout bounds it).
///
/// Errors: whatever [`StateDir::open_store`] returns, except an unreachable database.
pub(super) async fn open_store(
    state: &StateDir,
    signals: &mut Signals,
) -> Result<Option<Store>, StateDirError> {
    let mut pause = Backoff::<tokio::time::Instant>::new(FIRST_PAUSE, MAX_PAUSE);
    loop {
        let attempt = state.clone();
        let opened = tokio::task::spawn_blocking(move || attempt.open_store())
            .await
            .expect("open_store panicked");
        match opened {
            Err(StateDirError::Store(e @ StoreError::Connect { .. })) => {
                let wait = pause.next_wait();
                // The error names host, database and user, never the password.
                tracing::warn!(
                    error = %e,
                    retry_in_secs = wait.as_secs(),
                    "the database cannot be reached; the daemon claims nothing until it can"
                );
                tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                signal = signals.stop() => {
                    tracing::info!(signal, "stopping before the database could be reached");
                    return Ok(None);
                }
                }
            }
            other => return other.map(Some),
        }
    }
}
