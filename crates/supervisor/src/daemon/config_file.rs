//! fleet.toml as the file system shows it: which version of the file was read ([`FileStamp`]:
//! device, inode, size, write time), when an edit has settled ([`RELOAD_SETTLE`],
//! [`SETTLE_AT_MOST`]), one read of the file with its stamps around it ([`FileRead`]), and what
//! the daemon remembers of the file beside the config it holds ([`ConfigFile`]).
//!
//! These are the facts `reload` decides on; this module never applies a config, never writes
//! the database and never touches the daemon's state beyond the [`ConfigFile`] it is handed.
//! (Kept apart from `reload` so that the daemon's state, which holds a [`ConfigFile`], does not
//! depend on the module that acts on that state.)

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use config::{Config, ConfigErrors};
use tokio::time::Instant;

/// How long fleet.toml must stay unchanged after a noticed edit before it is re-read.
pub(super) const RELOAD_SETTLE: Duration = Duration::from_millis(300);

/// How long the file may keep changing before the daemon stops waiting for it to settle: a file
/// rewritten without pause must not hold up ends, retries and schedules for ever. Past it, the
/// config in force is used as for an invalid file (nothing is ended on its strength).
pub(super) const SETTLE_AT_MOST: Duration = Duration::from_secs(10);

/// One version of the config file as the file system shows it: which file (device and inode, so
/// a save by rename is a new version), its size, and when it was last written. A stamp taken
/// once the file had been quiet for [`RELOAD_SETTLE`] names one content: any later write moves
/// the time past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    /// The stamp of the file at `path` (following a symlink to its target). Errors: the file
    /// cannot be looked at (missing, no permission).
    pub(super) fn of(path: &Path) -> std::io::Result<FileStamp> {
        let m = std::fs::metadata(path)?;
        Ok(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            modified: m.modified().ok(),
        })
    }

    /// How long until the file has been quiet for [`RELOAD_SETTLE`] at `now`; zero once it has.
    /// A write time in the future by more than that (the clock was stepped back since) counts
    /// as quiet, or the file would look busy until the clock caught up.
    pub(super) fn settle_left(&self, now: SystemTime) -> Duration {
        match self.modified.map(|m| now.duration_since(m)) {
            None => Duration::ZERO,
            Some(Ok(age)) => RELOAD_SETTLE.saturating_sub(age),
            Some(Err(ahead)) if ahead.duration() < RELOAD_SETTLE => RELOAD_SETTLE,
            Some(Err(_)) => Duration::ZERO,
        }
    }
}

/// What the daemon knows of the file, beside the config it holds.
#[derive(Debug, Default)]
pub(super) struct ConfigFile {
    /// The stamp of the settled file whose content is the config in force.
    pub(super) confirmed: Option<FileStamp>,
    /// The stamp of a settled file that was refused (invalid, or moving the state directory).
    pub(super) refused: Option<FileStamp>,
    /// Since when the file has been seen changing without settling.
    pub(super) settling_since: Option<Instant>,
    /// The file has kept changing past [`SETTLE_AT_MOST`], and that was logged.
    pub(super) unsettled_logged: bool,
    /// The refusal the daemon's row records, if any (`fleet status` shows it).
    pub(super) recorded_error: Option<String>,
}

impl ConfigFile {
    /// The file was found settled: whatever waited for it to settle is over.
    pub(super) fn settled(&mut self) {
        self.settling_since = None;
        self.unsettled_logged = false;
    }
}

/// One read of the file: its stamp before and after, and what it parsed to.
pub(super) struct FileRead {
    /// The file's stamp before the read (`None`: it could not be looked at).
    pub(super) before: Option<FileStamp>,
    /// What the file parsed to.
    pub(super) loaded: Result<Config, ConfigErrors>,
    /// The file's stamp after the read.
    pub(super) after: Option<FileStamp>,
    /// The host name the file itself gives (its `host` key, else the machine's hostname),
    /// before the daemon's own name replaced it in `loaded`.
    pub(super) file_host: Option<String>,
    /// The digest of the file's bytes as read ([`config::digest`]; `None`: unreadable):
    /// what says whether its content changed, which a stamp alone (a `touch`) cannot.
    pub(super) digest: Option<String>,
}

impl FileRead {
    /// Reads and parses the file at `path` (blocking), as read on the host `host`: a daemon
    /// keeps the name it started with, so that what counts as its runs never changes under it.
    pub(super) fn of(path: &Path, host: &str) -> FileRead {
        let before = FileStamp::of(path).ok();
        let digest = std::fs::read(path).ok().map(|b| config::digest(&b));
        let loaded = Config::load(path);
        let after = FileStamp::of(path).ok();
        let file_host = loaded.as_ref().ok().map(|c| c.host.clone());
        FileRead {
            before,
            loaded: loaded.map(|c| c.for_host(host.to_string())),
            after,
            file_host,
            digest,
        }
    }

    /// The stamp of a read that saw one settled version of the file, if it did: unchanged
    /// during the read, and quiet for [`RELOAD_SETTLE`] at `now`.
    pub(super) fn settled(&self, now: SystemTime) -> Option<FileStamp> {
        self.before
            .filter(|b| Some(*b) == self.after && b.settle_left(now).is_zero())
    }

    /// How long until the file settles (a read that saw it change waits a whole settle).
    pub(super) fn settle_left(&self, now: SystemTime) -> Duration {
        match self.before {
            Some(b) if Some(b) == self.after => b.settle_left(now),
            _ => RELOAD_SETTLE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(modified: Option<SystemTime>) -> FileStamp {
        FileStamp {
            dev: 1,
            ino: 2,
            len: 3,
            modified,
        }
    }

    /// A file written less than RELOAD_SETTLE ago is still settling; one written long ago, or
    /// far in the future (the clock was stepped back since), has settled.
    #[test]
    fn a_file_settles_once_quiet_for_the_settle_time() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let just = stamp(Some(now - Duration::from_millis(100)));
        assert_eq!(
            just.settle_left(now),
            RELOAD_SETTLE - Duration::from_millis(100)
        );
        assert!(stamp(Some(now - RELOAD_SETTLE)).settle_left(now).is_zero());
        assert!(stamp(Some(now - Duration::from_secs(60)))
            .settle_left(now)
            .is_zero());
        assert_eq!(
            stamp(Some(now + Duration::from_millis(10))).settle_left(now),
            RELOAD_SETTLE
        );
        assert!(stamp(Some(now + Duration::from_secs(3600)))
            .settle_left(now)
            .is_zero());
        assert!(stamp(None).settle_left(now).is_zero());
    }

    /// A read that saw the file change under it has not seen one settled version.
    #[test]
    fn a_read_that_saw_a_change_is_not_settled() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let old = stamp(Some(now - Duration::from_secs(60)));
        let read = |before, after| FileRead {
            before,
            loaded: Err(ConfigErrors(Vec::new())),
            after,
            file_host: None,
            digest: None,
        };
        assert_eq!(read(Some(old), Some(old)).settled(now), Some(old));
        let changed = FileStamp { len: 4, ..old };
        assert_eq!(read(Some(old), Some(changed)).settled(now), None);
        assert_eq!(
            read(Some(old), Some(changed)).settle_left(now),
            RELOAD_SETTLE
        );
        assert_eq!(read(None, None).settled(now), None);
    }
}
