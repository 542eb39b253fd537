//! The pool's connection manager: the driver's own, but a connection is checked, at every
//! check-out, by a round trip bounded in time on the client's side. It owns that bound and
//! nothing else; it never runs a statement of fleet's.
//!
//! Why: a server that is there but does not answer (its processes stopped, a machine frozen, a
//! network path that drops packets) answers no statement, and no server-side timeout can fire
//! in a server that is not running. The driver has no read timeout, so without this a check-out
//! would hand out a connection whose first statement waits for ever; with it, the check-out
//! fails within [`CHECK_TIMEOUT`] and the pool's callers get [`crate::StoreError::Unreachable`]
//! (the daemon's outage path) once the pool's connection timeout passes.

use std::time::Duration;

use postgres::Client;
use r2d2_postgres::PostgresConnectionManager;

/// How long the check-out round trip may take before the connection counts as broken.
pub(super) const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// [`PostgresConnectionManager`], with the check-out test bounded by [`CHECK_TIMEOUT`].
pub(crate) struct TimedManager(pub(super) PostgresConnectionManager<super::tls::Connector>);

impl r2d2::ManageConnection for TimedManager {
    type Connection = Client;
    /// The driver's error shown with the server's words and a TLS refusal's reason: the pool
    /// keeps only the text of its last failure, which a check-out that times out reports.
    type Error = super::PgError;

    fn connect(&self) -> Result<Client, super::PgError> {
        self.0.connect().map_err(super::PgError)
    }

    fn is_valid(&self, client: &mut Client) -> Result<(), super::PgError> {
        client.is_valid(CHECK_TIMEOUT).map_err(super::PgError)
    }

    fn has_broken(&self, client: &mut Client) -> bool {
        client.is_closed()
    }
}
