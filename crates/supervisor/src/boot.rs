//! Which claims a restart of the machine may have cut short before their `started` record
//! reached the disk.
//!
//! A shim writes its `started` record before it spawns the command, and does not wait for the
//! disk: until the machine restarts, every reader sees the record through the page cache, so a
//! claim with no `started` record provably never started and recovery queues it again. A
//! restart of the machine may lose a record that was written but not yet on disk, and with it
//! that proof. So recovery must know, for each claim it settles, whether the machine has
//! restarted since the claim was made: if it has, a claim with no `started` record may have
//! started, and ends `lost` (retried if its project has retries left), never queued again as
//! if it never started. (Every command dies with the machine, so nothing of such a claim runs
//! any more either way; what this guards against is the same attempt started a second time.)
//!
//! The kernel names each boot with a random id (`/proc/sys/kernel/random/boot_id`): the page
//! cache survives exactly as long as it does. Every daemon adds a line to `<state_dir>/boot`,
//! its epoch and that id, and makes the file durable, before it claims anything (the last
//! [`KEPT`] daemons' lines are kept). A claim is known to be of the current boot when it was
//! made by this daemon, or by a daemon whose line names the current boot. Anything less
//! certain (the file unreadable, no line for the claim's epoch, no boot id to compare) counts
//! as a restart: the safe side, which may end a claim `lost` that would have been queued
//! again.
//!
//! No file at all means no daemon of a version that skips the sync has claimed in this state
//! directory, since each writes it before its first claim: every `started` record there was
//! synced by its shim, and its absence proves the command never started, restart or not. The
//! first daemon that makes the file writes that epoch in it too (`since EPOCH`, kept for
//! good): a claim of an earlier epoch was made by a version that synced, and keeps that rule.
//!
//! Removing the file loses that knowledge: the next daemon takes every earlier claim for one
//! whose shim synced. Like the run files, it is the state directory's and is never removed.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The file in the state directory that names the recent daemons' epochs and the boot each
/// ran in, after the first epoch whose shims skip the `started` record's sync.
pub const BOOT_FILE: &str = "boot";

/// Where the kernel names the current boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// The current boot's id (a UUID), or `None` when the kernel does not say. Test builds
/// (feature `failpoints`) take `FLEET_TEST_BOOT_ID` instead when it is set, so that a test can
/// stand for a machine that restarted.
pub fn current() -> Option<String> {
    #[cfg(feature = "failpoints")]
    if let Some(id) = std::env::var_os("FLEET_TEST_BOOT_ID") {
        return id.into_string().ok();
    }
    let id = std::fs::read_to_string(BOOT_ID).ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// How many daemons' lines [`BOOT_FILE`] keeps. A claim older than all of them is judged as
/// made before a restart: it has then outlived that many daemon starts unsettled.
pub const KEPT: usize = 64;

/// What the earlier daemons of this state directory recorded ([`BOOT_FILE`]).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Earlier {
    /// No file: no daemon that skips the `started` record's sync has claimed here.
    None,
    /// The first epoch whose shims skip that sync (`None`: the line is missing, and every
    /// epoch counts as one), and each daemon's epoch and the boot it ran in (`None`: a boot it
    /// could not name).
    Recorded {
        since: Option<i64>,
        lines: Vec<(i64, Option<String>)>,
    },
    /// A file that could not be read: nothing is known.
    Unknown,
}

/// For one daemon: whether a claim's `started` record, if its shim wrote one, is still there
/// to be read ([`Boots::start_survives`]).
#[derive(Clone, Debug)]
pub struct Boots {
    earlier: Earlier,
    current: Option<String>,
    own_epoch: i64,
}

impl Boots {
    /// Reads the earlier daemons' lines in `state_dir`, then adds this daemon's (`own_epoch`
    /// and the current boot) and makes the file durable: written whole to `boot.new`, synced,
    /// renamed over `boot`, and the folder synced. Call once per daemon, after the takeover and
    /// before the first claim. Says at WARN when the kernel names no boot or the file cannot be
    /// read: every earlier claim with no `started` record then ends `lost`.
    ///
    /// Errors: the file could not be written or synced; the message names the file. The daemon
    /// must not claim then: its shims' `started` records would not be judged rightly after a
    /// restart of the machine.
    pub fn take(state_dir: &Path, own_epoch: i64) -> io::Result<Boots> {
        Boots::take_in(state_dir, own_epoch, current())
    }

    /// [`Boots::take`] with the current boot given (`None`: unknown).
    pub fn take_in(state_dir: &Path, own_epoch: i64, current: Option<String>) -> io::Result<Boots> {
        let path = state_dir.join(BOOT_FILE);
        let earlier = match std::fs::read_to_string(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Earlier::None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the record of earlier boots: every claim of an earlier daemon with no start record ends lost");
                Earlier::Unknown
            }
            Ok(text) => parse(&text),
        };
        if current.is_none() {
            tracing::warn!(
                "the kernel names no boot ({BOOT_ID}): a restart of the machine cannot be told \
                 apart, and every claim of an earlier daemon with no start record ends lost"
            );
        }
        let (since, mut lines) = match &earlier {
            Earlier::Recorded { since, lines } => (*since, lines.clone()),
            // The first daemon here that skips the sync: the claims before it were synced.
            Earlier::None => (Some(own_epoch), Vec::new()),
            Earlier::Unknown => (None, Vec::new()),
        };
        lines.retain(|(epoch, _)| *epoch != own_epoch);
        lines.push((own_epoch, current.clone()));
        let from = lines.len().saturating_sub(KEPT);
        let mut text = since.map(|e| format!("since {e}\n")).unwrap_or_default();
        for (epoch, boot) in &lines[from..] {
            text += &format!("{epoch} {}\n", boot.as_deref().unwrap_or(UNKNOWN));
        }
        // Whole or not at all: a crash leaves the earlier file (which lacks this daemon's line,
        // but it has claimed nothing yet) or the new one, never a torn one.
        let temporary = state_dir.join(format!("{BOOT_FILE}.new"));
        let named = |at: &Path| {
            let at = at.display().to_string();
            move |e: io::Error| io::Error::new(e.kind(), format!("{at}: {e}"))
        };
        let written = write_synced(&temporary, &text)
            .map_err(named(&temporary))
            .and_then(|()| std::fs::rename(&temporary, &path).map_err(named(&path)))
            .and_then(|()| {
                File::open(state_dir)
                    .and_then(|d| d.sync_all())
                    .map_err(named(state_dir))
            });
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written?;
        Ok(Boots {
            earlier,
            current,
            own_epoch,
        })
    }

    /// Whether a `started` record of a claim made at `claim_epoch` would still be readable had
    /// its shim written one: the claim is this daemon's, or an earlier daemon's that ran in the
    /// current boot, or one made before any daemon here skipped that record's sync. False means
    /// the machine may have restarted since the claim: its missing `started` record proves
    /// nothing. `None`: the claim's epoch is not recorded (a row written by another program),
    /// which is as unsure as an epoch no line names.
    pub fn start_survives(&self, claim_epoch: Option<i64>) -> bool {
        if claim_epoch == Some(self.own_epoch) {
            return true;
        }
        match &self.earlier {
            Earlier::None => true,
            Earlier::Unknown => false,
            Earlier::Recorded { since, lines } => match claim_epoch {
                None => false,
                Some(e) if since.is_some_and(|first| e < first) => true,
                Some(e) => self.current.as_deref().is_some_and(|current| {
                    lines
                        .iter()
                        .any(|(epoch, boot)| *epoch == e && boot.as_deref() == Some(current))
                }),
            },
        }
    }
}

/// Writes `text` to a new file at `path` (replacing one there, never through a link) and
/// syncs it.
fn write_synced(path: &Path, text: &str) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        // Never through a link someone left in its place.
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // A daemon run as root in another user's state directory leaves that user's file.
    crate::sys::files::give_to_folder_owner(&file, path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

/// The highest epoch `state_dir`'s [`BOOT_FILE`] names (`Ok(None)`: no file, or no epoch in
/// it): the epoch of the last daemon that ran here, which no later daemon may take again.
///
/// Errors: the file exists but cannot be read.
pub fn highest_epoch(state_dir: &Path) -> io::Result<Option<i64>> {
    match std::fs::read_to_string(state_dir.join(BOOT_FILE)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
        Ok(text) => Ok(match parse(&text) {
            Earlier::Recorded { since, lines } => {
                lines.iter().map(|(epoch, _)| *epoch).chain(since).max()
            }
            Earlier::None | Earlier::Unknown => None,
        }),
    }
}

/// How a daemon that could not name its boot writes it.
const UNKNOWN: &str = "unknown";

/// `since EPOCH` and lines `EPOCH BOOT`; a line that is neither is left out (its claims then
/// count as made before a restart).
fn parse(text: &str) -> Earlier {
    let mut since = None;
    let mut lines = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["since", epoch] => since = epoch.parse().ok().or(since),
            [epoch, boot] => {
                if let Ok(epoch) = epoch.parse() {
                    lines.push((epoch, (*boot != UNKNOWN).then(|| boot.to_string())));
                }
            }
            _ => {}
        }
    }
    Earlier::Recorded { since, lines }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn with_no_file_every_start_record_was_synced() {
        let d = dir();
        let boots = Boots::take_in(d.path(), 5, Some("b1".into())).unwrap();
        assert!(boots.start_survives(Some(4)));
        assert!(boots.start_survives(None));
        assert!(boots.start_survives(Some(5)));
    }

    #[test]
    fn claims_survive_only_in_the_boot_their_daemon_ran_in() {
        let d = dir();
        Boots::take_in(d.path(), 3, Some("b1".into())).unwrap();
        Boots::take_in(d.path(), 4, Some("b1".into())).unwrap();
        let same = Boots::take_in(d.path(), 5, Some("b1".into())).unwrap();
        assert!(same.start_survives(Some(4)));
        assert!(same.start_survives(Some(3)), "two daemons back, same boot");
        assert!(!same.start_survives(None));
        assert!(same.start_survives(Some(5)));
        let restarted = Boots::take_in(d.path(), 6, Some("b2".into())).unwrap();
        assert!(!restarted.start_survives(Some(5)));
        assert!(!restarted.start_survives(Some(3)));
        assert!(restarted.start_survives(Some(6)));
        let again = Boots::take_in(d.path(), 7, Some("b2".into())).unwrap();
        assert!(again.start_survives(Some(6)));
        assert!(!again.start_survives(Some(5)));
    }

    /// The claims of the version before (which synced every `started` record) keep their rule
    /// whatever happens after: the first daemon that made the file named its own epoch as the
    /// first that skips the sync.
    #[test]
    fn claims_made_before_the_first_file_keep_their_synced_rule() {
        let d = dir();
        Boots::take_in(d.path(), 10, Some("b1".into())).unwrap();
        Boots::take_in(d.path(), 11, Some("b1".into())).unwrap();
        let restarted = Boots::take_in(d.path(), 12, Some("b2".into())).unwrap();
        assert!(restarted.start_survives(Some(9)), "synced by its shim");
        assert!(!restarted.start_survives(Some(10)));
        assert!(!restarted.start_survives(Some(11)));
        let text = std::fs::read_to_string(d.path().join(BOOT_FILE)).unwrap();
        assert!(text.starts_with("since 10\n"), "{text}");
    }

    #[test]
    fn an_unknown_boot_or_a_bad_line_is_a_restart() {
        let d = dir();
        Boots::take_in(d.path(), 4, None).unwrap();
        let after_unknown = Boots::take_in(d.path(), 5, None).unwrap();
        assert!(!after_unknown.start_survives(Some(4)));
        std::fs::write(d.path().join(BOOT_FILE), "4 b1 extra\n3 b1\n").unwrap();
        let after_bad = Boots::take_in(d.path(), 5, Some("b1".into())).unwrap();
        assert!(!after_bad.start_survives(Some(4)));
        assert!(after_bad.start_survives(Some(3)));
        assert!(
            !after_bad.start_survives(Some(1)),
            "no `since` line: every epoch counts as one that skips the sync"
        );
        assert_eq!(
            std::fs::read_to_string(d.path().join(BOOT_FILE)).unwrap(),
            "3 b1\n5 b1\n"
        );
    }

    #[test]
    fn the_file_keeps_the_last_daemons_lines() {
        let d = dir();
        for epoch in 1..=(KEPT as i64 + 10) {
            Boots::take_in(d.path(), epoch, Some("b".into())).unwrap();
        }
        let text = std::fs::read_to_string(d.path().join(BOOT_FILE)).unwrap();
        assert_eq!(text.lines().count(), KEPT + 1, "{text}");
        let boots = Boots::take_in(d.path(), 100, Some("b".into())).unwrap();
        assert!(boots.start_survives(Some(KEPT as i64 + 10)));
        assert!(!boots.start_survives(Some(5)), "forgotten: unsure");
    }

    /// A file that cannot be written stops the daemon with the file named, and leaves no
    /// temporary file behind.
    #[test]
    fn a_file_that_cannot_be_written_is_an_error_naming_it() {
        let d = dir();
        std::fs::create_dir(d.path().join(BOOT_FILE)).unwrap();
        std::fs::write(d.path().join(BOOT_FILE).join("x"), "").unwrap();
        let e = Boots::take_in(d.path(), 1, Some("b".into())).unwrap_err();
        assert!(
            e.to_string()
                .contains(&d.path().join(BOOT_FILE).display().to_string()),
            "{e}"
        );
        assert!(!d.path().join("boot.new").exists());
    }

    #[test]
    fn the_kernel_names_this_boot() {
        let id = current().expect("a boot id");
        assert!(!id.is_empty() && !id.contains(char::is_whitespace), "{id}");
    }
}
