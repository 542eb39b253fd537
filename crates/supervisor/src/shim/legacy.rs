//! The earlier versions' run layouts, frozen, for the upgrade tests only (built with the
//! `failpoints` feature, never in a release). A shim whose environment has [`ENV`] set writes
//! one of them, so that a test can leave runs in flight exactly as a shim of an earlier
//! version would, and check that a daemon of this version adopts and settles them:
//!
//! - `flat` (the version just before this one): a lock file per run, `runs/<id>.lock`, flocked
//!   by the shim, with the records appended to it, and `runs/<id>.log`;
//! - `folder` (the one before): a folder per run, `runs/<id>/`, with `lock` (the records
//!   appended to it), `log` and `tombstones`;
//! - `files` (the one before that): the same folder, but each record in a file of its own
//!   (`started`, `running`, `exit`), written to a temporary file and renamed into place, the
//!   durable ones fsynced with their folder.
//!
//! Why frozen copies rather than the earlier releases built from git: each would be a cold
//! build of the whole workspace (many minutes on a CI machine, and a checkout with history),
//! while what differs for an upgrade is where the shim writes alone. It must never be used
//! outside tests, and never read: reading every layout is [`super::runfiles`]'s job.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;

use super::runfiles::{
    Layout, Record, RunFiles, RunLock, EXIT_FILE, FILE_MODE, RUNNING_FILE, STARTED_FILE,
};

/// The environment variable that selects an earlier layout: `flat`, `folder` or `files`
/// (anything else is `files`, the first layout these tests knew); removed from the command's
/// environment.
pub const ENV: &str = "FLEET_TEST_LEGACY_RUN_LAYOUT";

/// Which earlier layout this shim writes, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Legacy {
    /// A lock file per run, records appended to it.
    Flat,
    /// A folder per run, records appended to its `lock`.
    Folder,
    /// A folder per run, a file per record.
    Files,
}

/// The earlier layout this shim was asked to write, from [`ENV`].
pub fn selected() -> Option<Legacy> {
    let value = std::env::var_os(ENV)?;
    Some(if value == "flat" {
        Legacy::Flat
    } else if value == "folder" {
        Legacy::Folder
    } else {
        Legacy::Files
    })
}

/// `files` as a shim of the selected earlier layout writes them (unchanged when none is).
pub fn files_for_shim(files: RunFiles) -> RunFiles {
    match selected() {
        Some(Legacy::Flat) => files.with_layout(Layout::Flat),
        Some(Legacy::Folder | Legacy::Files) => files.with_layout(Layout::Folder),
        None => files,
    }
}

/// Writes `record` as the `files` layout did: its own file in the run's folder, replaced
/// atomically by rename; `started` and `exit` fsynced with their folder. `None` when this
/// shim writes another layout (the caller appends the record then).
///
/// Errors: `InvalidInput` if `held` is another run's lock; I/O errors.
pub fn write(files: &RunFiles, held: &RunLock, record: &Record) -> Option<io::Result<()>> {
    if selected() != Some(Legacy::Files) {
        return None;
    }
    Some(write_file(files, held, record))
}

fn write_file(files: &RunFiles, held: &RunLock, record: &Record) -> io::Result<()> {
    let folder = files.folder();
    if held.path() != folder.join(super::runfiles::LOCK_FILE) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "legacy record written under another run's lock",
        ));
    }
    let (name, durable, bytes) = match record {
        Record::Started(r) => (STARTED_FILE, true, serde_json::to_vec(r)),
        Record::Running(r) => (RUNNING_FILE, false, serde_json::to_vec(r)),
        Record::Exit(r) => (EXIT_FILE, true, serde_json::to_vec(r)),
        Record::Tombstone(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a shim never writes a tombstone",
            ))
        }
    };
    let mut bytes = bytes.map_err(io::Error::other)?;
    bytes.push(b'\n');
    let tmp = folder.join(format!(".{name}.tmp"));
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
    std::fs::rename(&tmp, folder.join(name))?;
    if durable {
        File::open(&folder)?.sync_all()?;
    }
    Ok(())
}
