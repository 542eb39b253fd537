//! The previous version's run folder layout, frozen, for the upgrade tests only (built with the
//! `failpoints` feature, never in a release): each record in a file of its own (`started`,
//! `running`, `exit`), written to a temporary file and renamed into place, the durable ones
//! fsynced with their folder. A shim whose environment has [`ENV`] set writes this layout, so
//! that a test can leave runs in flight exactly as a shim of the previous version would, and
//! check that a daemon of this version adopts and settles them.
//!
//! Why a frozen copy rather than the previous release built from git: that build is a cold
//! build of the whole workspace (many minutes on a CI machine, and a checkout with history),
//! while what differs between the two versions for an upgrade is this writer alone — the
//! lock, the tombstones and the log are the same files in both. It must never be used outside
//! tests, and never read: reading both layouts is [`super::rundir`]'s job.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;

use super::rundir::{Record, RunDir, RunLock, EXIT_FILE, FILE_MODE, RUNNING_FILE, STARTED_FILE};

/// The environment variable that selects the legacy layout (any value); removed from the
/// command's environment.
pub const ENV: &str = "FLEET_TEST_LEGACY_RUN_LAYOUT";

/// Whether this shim writes the previous version's layout.
pub fn enabled() -> bool {
    std::env::var_os(ENV).is_some()
}

/// Writes `record` as the previous version did: its own file, replaced atomically by rename;
/// `started` and `exit` fsynced with their folder.
///
/// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
pub fn write(dir: &RunDir, held: &RunLock, record: &Record) -> io::Result<()> {
    if held.dir() != dir.path() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "legacy record written under another run's lock",
        ));
    }
    let (name, durable, bytes) = match record {
        Record::Started(r) => (STARTED_FILE, true, serde_json::to_vec(r)),
        Record::Running(r) => (RUNNING_FILE, false, serde_json::to_vec(r)),
        Record::Exit(r) => (EXIT_FILE, true, serde_json::to_vec(r)),
    };
    let mut bytes = bytes.map_err(io::Error::other)?;
    bytes.push(b'\n');
    let tmp = dir.path().join(format!(".{name}.tmp"));
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(&tmp)?;
        file.write_all(&bytes)?;
        if durable {
            file.sync_all()?;
        }
    }
    std::fs::rename(&tmp, dir.path().join(name))?;
    if durable {
        File::open(dir.path())?.sync_all()?;
    }
    Ok(())
}
