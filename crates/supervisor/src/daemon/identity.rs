//! This daemon as one host of a shared database, by what it cannot take from its config: where
//! it runs ([`place`]), the clock it judges time by ([`follow_database_clock`]), and its clean
//! stop ([`record_stop`]).
//!
//! - *Place.* A host name is not an identity: a copied fleet.toml gives two machines the same
//!   one. So each take-over records the machine (`uname -n`) and the state directory's id (a
//!   random id made once and kept in the directory, [`ID_FILE`]), and the store refuses the name
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

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use store::db_clock::{self, SKEW_MS};
use store::{Millis, Place, Store};

use crate::statedir::StateDir;

/// The file in the state directory that holds its id: 32 hex digits, made once.
pub const ID_FILE: &str = "id";

/// Where this daemon runs: the machine's node name and the state directory's id (made and kept
/// in [`ID_FILE`] the first time). `None` on SQLite, or when the id cannot be read or made (said
/// in the log: the daemon then runs as a daemon of no known place, refusing no one and refused
/// by no one, as before places existed).
pub(super) fn place(state: &StateDir) -> Option<Place> {
    state.database()?;
    let machine = match nix::sys::utsname::uname() {
        Ok(uts) => uts.nodename().to_string_lossy().into_owned(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the machine's name; this host's place is not recorded");
            return None;
        }
    };
    match state_dir_id(state.root()) {
        Ok(state_dir_id) => Some(Place {
            machine,
            state_dir_id,
        }),
        Err(e) => {
            tracing::warn!(error = %e, path = %state.root().join(ID_FILE).display(), "cannot read or make the state directory's id; this host's place is not recorded");
            None
        }
    }
}

/// The id kept in `root`'s [`ID_FILE`], made (random, durable before it is used) if there is
/// none. Two daemons cannot race here: the caller holds the daemon lock.
fn state_dir_id(root: &Path) -> io::Result<String> {
    let path = root.join(ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if is_id(text.trim()) => return Ok(text.trim().to_string()),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "the state directory's id file does not hold an id; a new one is made")
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut bytes))?;
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = root.join(format!("{ID_FILE}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    // A daemon run as root in another user's state directory leaves that user's file.
    crate::sys::files::give_to_folder_owner(&f, &tmp)?;
    f.write_all(format!("{id}\n").as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(root)?.sync_all()?;
    Ok(id)
}

fn is_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
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
    let was = before.is_some_and(db_clock::skewed);
    if db_clock::skewed(offset) && !was {
        tracing::warn!(
            offset_ms = offset,
            "{}: fleet judges time by the database's clock, but this host's own log lines (and its commands' clocks) are off by as much; set its clock right (NTP)",
            db_clock::skew_words(offset)
        );
    } else if was && !db_clock::skewed(offset) {
        tracing::info!(
            offset_ms = offset,
            "this host's clock is within {} s of the database's again",
            SKEW_MS / 1000
        );
    } else if before.is_none() {
        tracing::info!(
            offset_ms = offset,
            round_trip_ms = reading.round_trip.as_millis() as u64,
            "following the database's clock"
        );
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
