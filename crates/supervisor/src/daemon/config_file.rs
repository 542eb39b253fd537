//! fleet.toml as the file system shows it: which version of the file was read ([`FileStamp`]:
//! device, inode, size, write time), one read of the file with its stamps around it
//! ([`FileRead`]), when a version has settled ([`RELOAD_SETTLE`], [`SETTLE_AT_MOST`]), and what
//! the daemon remembers of the file beside the config it holds ([`ConfigFile`]).
//!
//! A version has settled when this daemon has found it unchanged — same stamp, same bytes —
//! for [`RELOAD_SETTLE`] by its own clock. The file's write time alone cannot say so: a
//! truncation (the first half of a plain rewrite) is not always given a new one, so a file
//! just emptied can carry the time of a write long past.
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

/// How long a version of fleet.toml must be found unchanged before it is applied.
pub(super) const RELOAD_SETTLE: Duration = Duration::from_millis(300);

/// How long the file may keep changing before the daemon stops waiting for it to settle: a file
/// rewritten without pause must not hold up ends, retries and schedules for ever. Past it, the
/// config in force is used as for an invalid file (nothing is ended on its strength).
pub(super) const SETTLE_AT_MOST: Duration = Duration::from_secs(10);

/// One version of the config file as the file system shows it: which file (device and inode, so
/// a save by rename is a new version), its size, and when it was last written.
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
}

/// A version of the file as one read found it: its stamp (`None`: there was no file) and the
/// digest of its bytes (`None`: none could be read).
type Version = (Option<FileStamp>, Option<String>);

/// What the daemon knows of the file, beside the config it holds.
#[derive(Debug, Default)]
pub(super) struct ConfigFile {
    /// The stamp of the settled file whose content is the config in force.
    pub(super) confirmed: Option<FileStamp>,
    /// The stamp of a settled file that was refused (invalid, or moving the state directory).
    pub(super) refused: Option<FileStamp>,
    /// The version the last read found, and when a read first found it.
    pub(super) seen: Option<(Version, Instant)>,
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

    /// Takes one read in at `now`. `Ok(stamp)`: the version it found has been found unchanged
    /// for [`RELOAD_SETTLE`] and may be applied (`stamp` is `None` when there is no file at
    /// all, an answer too). `Err(left)`: not yet; read again after `left`. A read that saw the
    /// file change under it found no version, and starts the wait over.
    pub(super) fn settle(
        &mut self,
        read: &FileRead,
        now: Instant,
    ) -> Result<Option<FileStamp>, Duration> {
        if read.before != read.after {
            self.seen = None;
            return Err(RELOAD_SETTLE);
        }
        let version = (read.before, read.digest.clone());
        match &self.seen {
            Some((seen, since)) if *seen == version => {
                let left = RELOAD_SETTLE.saturating_sub(now.saturating_duration_since(*since));
                if left.is_zero() {
                    Ok(read.before)
                } else {
                    Err(left)
                }
            }
            _ => {
                self.seen = Some((version, now));
                Err(RELOAD_SETTLE)
            }
        }
    }
}

/// One read of the file: its stamp before and after, its bytes and what they parse to.
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
    /// The bytes read, as text (`None`: unreadable or not UTF-8): what is published, so that
    /// the fleet gets exactly the text applied here.
    pub(super) text: Option<String>,
}

impl FileRead {
    /// Reads and parses the file at `path` (blocking), once, as read on the host `host`: a
    /// daemon keeps the name it started with, so that what counts as its runs never changes
    /// under it.
    pub(super) fn of(path: &Path, host: &str) -> FileRead {
        let before = FileStamp::of(path).ok();
        let bytes = std::fs::read(path);
        let after = FileStamp::of(path).ok();
        let (loaded, digest, text) = match bytes {
            Ok(bytes) => (
                Config::from_bytes(&bytes, path),
                Some(config::digest(&bytes)),
                String::from_utf8(bytes).ok(),
            ),
            Err(e) => (Err(ConfigErrors::unreadable(path, &e)), None, None),
        };
        let file_host = loaded.as_ref().ok().map(|c| c.host.clone());
        FileRead {
            before,
            loaded: loaded.map(|c| c.for_host(host.to_string())),
            after,
            file_host,
            digest,
            text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(before: Option<FileStamp>, after: Option<FileStamp>, digest: &str) -> FileRead {
        FileRead {
            before,
            loaded: Err(ConfigErrors(Vec::new())),
            after,
            file_host: None,
            digest: Some(digest.to_string()),
            text: None,
        }
    }

    fn stamp(len: u64, secs: u64) -> FileStamp {
        FileStamp {
            dev: 1,
            ino: 2,
            len,
            modified: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)),
        }
    }

    /// A version is applied once this daemon has found it unchanged for the settle time,
    /// however old its write time says it is; a new version starts the wait over.
    #[test]
    fn a_version_settles_once_found_unchanged_for_the_settle_time() {
        let mut file = ConfigFile::default();
        let t0 = Instant::now();
        let old = stamp(177, 1_000);
        assert_eq!(
            file.settle(&read(Some(old), Some(old), "a"), t0),
            Err(RELOAD_SETTLE)
        );
        let half = t0 + RELOAD_SETTLE / 2;
        assert_eq!(
            file.settle(&read(Some(old), Some(old), "a"), half),
            Err(RELOAD_SETTLE / 2)
        );
        assert_eq!(
            file.settle(&read(Some(old), Some(old), "a"), t0 + RELOAD_SETTLE),
            Ok(Some(old))
        );
        // Emptied without a new write time: a new version all the same.
        let emptied = stamp(0, 1_000);
        let t1 = t0 + RELOAD_SETTLE * 2;
        assert_eq!(
            file.settle(&read(Some(emptied), Some(emptied), "e"), t1),
            Err(RELOAD_SETTLE)
        );
        // The same stamp with other bytes is another version too.
        assert_eq!(
            file.settle(&read(Some(emptied), Some(emptied), "f"), t1 + RELOAD_SETTLE),
            Err(RELOAD_SETTLE)
        );
    }

    /// A read that saw the file change under it found no version: the wait starts over.
    #[test]
    fn a_read_that_saw_a_change_starts_the_wait_over() {
        let mut file = ConfigFile::default();
        let t0 = Instant::now();
        let old = stamp(177, 1_000);
        let _ = file.settle(&read(Some(old), Some(old), "a"), t0);
        let changed = stamp(178, 1_001);
        assert_eq!(
            file.settle(&read(Some(old), Some(changed), "a"), t0 + RELOAD_SETTLE),
            Err(RELOAD_SETTLE)
        );
        assert!(file.seen.is_none());
    }

    /// No file at all, found twice the settle time apart, is an answer (with no stamp).
    #[test]
    fn a_missing_file_settles_as_missing() {
        let mut file = ConfigFile::default();
        let t0 = Instant::now();
        let none = FileRead {
            digest: None,
            ..read(None, None, "")
        };
        assert_eq!(file.settle(&none, t0), Err(RELOAD_SETTLE));
        assert_eq!(file.settle(&none, t0 + RELOAD_SETTLE), Ok(None));
    }
}
