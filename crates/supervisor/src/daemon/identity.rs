//! This daemon as one host of a shared database, by what it cannot take from its config: where
//! it runs ([`place`]), the clock it judges time by ([`follow_database_clock`]), and its clean
//! stop ([`record_stop`]).
//!
//! - *Place.* A host name is not an identity: a copied fleet.toml gives two machines the same
//!   one. So each take-over records the machine (`uname -n`, and `/etc/machine-id`) and the
//!   state directory itself (its inode: the same folder keeps it when renamed on its
//!   filesystem, and a copy of it has another), [`place`], and the store refuses the name
//!   to a daemon of another place while the one holding it is alive; a daemon restarted in the
//!   same place (a crash, a restart within the liveness bound) takes over as before. Runs are
//!   settled only by a daemon of the place that claimed them (`Store::active_rows_here`): their
//!   files are there.
//! - *Clock.* Liveness, schedules and delays are judged by the database's clock, which the
//!   daemon measures before it takes over and again at each heartbeat, and follows
//!   ([`store::db_clock`]): every `now_ms` of this process is then the database's time. An
//!   offset past [`store::db_clock::SKEW_MS`] is logged when it appears (and when it is gone),
//!   and reported with each heartbeat, for `fleet hosts`, `fleet status` and `/metrics`.
//! - *Stop.* A clean stop is recorded in the host row, so that the host is silent at once and
//!   another place may take the name over without waiting out the liveness bound.
//!
//! On SQLite none of this applies: one state directory is one host, its clock the local one.

use std::io;
use std::os::unix::fs::MetadataExt;

use store::db_clock::{self, SKEW_MS};
use store::{Millis, Place, Store};

use crate::statedir::StateDir;

/// The offset last warned about while the warning stands (see [`follow_database_clock`]).
static SKEW_SAID: std::sync::Mutex<Option<Millis>> = std::sync::Mutex::new(None);

/// Where the machine keeps its id (systemd's, made at its first boot; a cloned virtual
/// machine is given a new one).
const MACHINE_ID: &str = "/etc/machine-id";

/// Where this daemon runs: the machine's node name, and an id of the place made of the
/// machine's id (`/etc/machine-id`, when there is one) and the state directory's inode — not
/// of anything written in the directory, which a copy would carry along and a deleted or garbled
/// file would lose. `Ok(None)` on SQLite.
///
/// Errors: the state directory cannot be looked at (it is locked by this daemon, so it exists:
/// this is a failing disk), or the machine's name cannot be read. A daemon of no known place
/// would refuse no one and be refused by no one: the caller does not start.
pub(super) fn place(state: &StateDir) -> io::Result<Option<Place>> {
    if state.database().is_none() {
        return Ok(None);
    }
    let machine = nix::sys::utsname::uname()
        .map_err(io::Error::from)?
        .nodename()
        .to_string_lossy()
        .into_owned();
    let machine_id = std::fs::read_to_string(MACHINE_ID)
        .map(|id| id.trim().to_string())
        .unwrap_or_default();
    let inode = std::fs::metadata(state.root())?.ino();
    Ok(Some(Place {
        machine,
        state_dir_id: format!("{machine_id}/{inode}"),
    }))
}

/// Measures the database's clock and follows it (blocking: one query). Returns the offset
/// measured (local minus database, ms), or `None` on SQLite or when it could not be measured
/// (the last reading, if any, is still followed). An offset past [`SKEW_MS`] is logged when it
/// appears; its end too.
pub(super) fn follow_database_clock(store: &Store) -> Option<Millis> {
    let reading = match store.database_clock() {
        Ok(Some(r)) => r,
        Ok(None) => return None,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the database's clock; following the last reading");
            return None;
        }
    };
    let offset = reading.offset_ms();
    let before = db_clock::follow(reading);
    // Said when the offset passes the bound, and cleared only once it is back under three
    // quarters of it, so that an offset sitting on the bound does not flap in the log; a jump of
    // a skewed clock by more than the bound (stepped while it was off) is said again.
    let mut said = SKEW_SAID.lock().unwrap_or_else(|e| e.into_inner());
    match *said {
        None if db_clock::skewed(offset) => {
            *said = Some(offset);
            tracing::warn!(
                offset_ms = offset,
                "{}: fleet judges time by the database's clock, but this host's own log lines (and its commands' clocks) are off by as much; set its clock right (NTP)",
                db_clock::skew_words(offset)
            );
        }
        Some(_) if offset.abs() <= SKEW_MS * 3 / 4 => {
            *said = None;
            tracing::info!(
                offset_ms = offset,
                "this host's clock is within {} s of the database's again",
                SKEW_MS / 1000
            );
        }
        Some(last) if (offset - last).abs() > SKEW_MS => {
            *said = Some(offset);
            tracing::warn!(
                offset_ms = offset,
                "{} (it was {:.1} s off before)",
                db_clock::skew_words(offset),
                last as f64 / 1000.0
            );
        }
        _ if before.is_none() => {
            tracing::info!(
                offset_ms = offset,
                round_trip_ms = reading.round_trip.as_millis() as u64,
                "following the database's clock"
            );
        }
        _ => {}
    }
    Some(offset)
}

/// Records this daemon's clean stop (epoch `epoch`) in its host row, so that the host is
/// silent at once (blocking). A failure is logged: the host then looks alive until its
/// heartbeat ages past the bound, as after a crash.
pub(super) fn record_stop(store: &Store, epoch: i64) {
    if let Err(e) = store.record_stop(epoch, store::now_ms()) {
        tracing::warn!(error = %e, "could not record this daemon's stop; this host looks alive until its heartbeat is old");
    }
}
