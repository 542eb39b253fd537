//! Re-reading fleet.toml while the daemon runs; knowing whether the config in force is what the
//! file says *now* ([`Daemon::config_view`]); and recording the caps in force in the daemon's
//! database row (what `fleet status` shows).
//!
//! A reload must never leave the daemon without a config: an edit that does not parse or
//! validate is refused whole and the last good config stays in force (the refusal is recorded
//! for `fleet status`), and an edit that moves the state directory is refused too (that needs a
//! restart, under the new directory's lock).
//!
//! The daemon's config may be older than the file: the watcher reloads only once an edit has
//! settled ([`RELOAD_SETTLE`]), and may be off. A command that read the newer file (`fleet
//! enqueue` of a project just added) can act before the daemon has caught up. So every step that
//! ends, skips or refuses something on the strength of the config first asks
//! [`Daemon::config_view`], which compares the file with what the config was read from, and
//! reads it again (applying it) when it changed and has settled. Such a step must never run on
//! a view that is not [`ConfigView::Current`] (ending queued runs of an unknown project) or at
//! least [`ConfigView::usable`] (retry decisions, schedule firing).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use store::{now_ms, RunId};
use tokio::time::Instant;

use super::event_loop::RELOAD_SETTLE;
use super::events::Event;
use super::state::Daemon;
use crate::caps::caps_json;
use crate::config::{Config, ConfigErrors};

/// How long the file may keep changing before the daemon stops waiting for it to settle: a file
/// rewritten without pause must not hold up ends, retries and schedules for ever. Past it, the
/// config in force is used as for an invalid file (nothing is ended on its strength).
pub const SETTLE_AT_MOST: Duration = Duration::from_secs(10);

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
    fn of(path: &Path) -> std::io::Result<FileStamp> {
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
    fn settle_left(&self, now: SystemTime) -> Duration {
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
    fn settled(&mut self) {
        self.settling_since = None;
        self.unsettled_logged = false;
    }
}

/// One read of the file: its stamp before and after, and what it parsed to.
struct FileRead {
    before: Option<FileStamp>,
    loaded: Result<Config, ConfigErrors>,
    after: Option<FileStamp>,
}

impl FileRead {
    /// Reads and parses the file at `path` (blocking).
    fn of(path: &Path) -> FileRead {
        let before = FileStamp::of(path).ok();
        let loaded = Config::load(path);
        let after = FileStamp::of(path).ok();
        FileRead {
            before,
            loaded,
            after,
        }
    }

    /// The stamp of a read that saw one settled version of the file, if it did: unchanged
    /// during the read, and quiet for [`RELOAD_SETTLE`] at `now`.
    fn settled(&self, now: SystemTime) -> Option<FileStamp> {
        self.before
            .filter(|b| Some(*b) == self.after && b.settle_left(now).is_zero())
    }

    /// How long until the file settles (a read that saw it change waits a whole settle).
    fn settle_left(&self, now: SystemTime) -> Duration {
        match self.before {
            Some(b) if Some(b) == self.after => b.settle_left(now),
            _ => RELOAD_SETTLE,
        }
    }
}

/// What the file says now, compared with the config in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConfigView {
    /// The file has settled and says exactly what the config in force says.
    Current,
    /// The file changed less than [`RELOAD_SETTLE`] ago: what it will say is not known yet.
    /// `same`: read now, it says what the config in force says. `left`: until it settles.
    Settling {
        /// Its content, read now, is the config in force.
        same: bool,
        /// How long until it has been quiet for [`RELOAD_SETTLE`].
        left: Duration,
    },
    /// The file has settled but is no config the daemon can use (it does not parse or
    /// validate, cannot be read, or moves the state directory), or it has kept changing for
    /// longer than [`SETTLE_AT_MOST`]. The last good config stays in force.
    Invalid,
}

impl ConfigView {
    /// Whether decisions that need the project's settings (retry policy, schedule and overlap)
    /// may use the config in force: yes unless the file holds a different config that has not
    /// settled yet. With an invalid file, the last good config is the newest there is.
    pub(super) fn usable(self) -> bool {
        !matches!(self, ConfigView::Settling { same: false, .. })
    }

    /// How long to wait before looking again, while the file settles.
    pub(super) fn settle_left(self) -> Option<Duration> {
        match self {
            ConfigView::Settling { left, .. } => Some(left),
            _ => None,
        }
    }
}

impl Daemon {
    /// Re-reads the config file; applies it if it is valid and keeps the state directory, and
    /// asks the next EVAL to sweep the queued runs of removed projects. Records the caps in
    /// force and the refusal, if any, in the daemon's row (a failure to record is only logged).
    pub(super) async fn reload_config(&mut self) {
        let path = self.config_path.clone();
        let read = tokio::task::spawn_blocking(move || FileRead::of(&path))
            .await
            .expect("config load panicked");
        self.apply_read(read, true).await;
    }

    /// Whether the config in force is what the file says now. Costs one `stat` when the file
    /// is unchanged since it was last read settled. A file that changed and has settled is read
    /// and applied (or refused) here, as a reload would, so that the answer is about the file
    /// as it is now; one still changing is left to settle (the caller waits
    /// [`ConfigView::settle_left`] and asks again).
    pub(super) async fn config_view(&mut self) -> ConfigView {
        let path = self.config_path.clone();
        let (confirmed, refused) = (self.config_file.confirmed, self.config_file.refused);
        let read = tokio::task::spawn_blocking(move || match FileStamp::of(&path) {
            Ok(s) if Some(s) == confirmed => Ok(ConfigView::Current),
            Ok(s) if Some(s) == refused => Ok(ConfigView::Invalid),
            _ => Err(Box::new(FileRead::of(&path))),
        })
        .await
        .expect("config read panicked");
        let read = match read {
            Ok(view) => {
                self.config_file.settled();
                return view;
            }
            Err(read) => *read,
        };
        let now = SystemTime::now();
        if read.settled(now).is_some() {
            self.config_file.settled();
            return if self.apply_read(read, false).await {
                ConfigView::Current
            } else {
                ConfigView::Invalid
            };
        }
        let since = *self
            .config_file
            .settling_since
            .get_or_insert_with(Instant::now);
        if since.elapsed() > SETTLE_AT_MOST {
            if !std::mem::replace(&mut self.config_file.unsettled_logged, true) {
                tracing::warn!(
                    config = %self.config_path.display(),
                    "the config file keeps changing; deciding with the config in force, and ending nothing on its strength"
                );
            }
            return ConfigView::Invalid;
        }
        ConfigView::Settling {
            same: matches!(&read.loaded, Ok(c) if c == &*self.config),
            left: read.settle_left(now),
        }
    }

    /// Applies what one read of the file found (see [`Daemon::reload_config`]) and remembers
    /// its stamp when the read saw a settled file. Returns whether the config in force is now
    /// what the read found. The daemon's row is rewritten for every reload asked for
    /// (`always`: `fleet reload`, SIGHUP, an edit seen by the watcher), and otherwise only when
    /// what it shows changes (the config applied, or a refusal made or cleared): a look taken
    /// for [`Daemon::config_view`] alone must not pass for a reload in `fleet status`.
    async fn apply_read(&mut self, read: FileRead, always: bool) -> bool {
        let settled = read.settled(SystemTime::now());
        let (caps, error, applied_new) = match read.loaded {
            Ok(new) if new.state_dir != self.config.state_dir => {
                let msg = format!(
                    "{}: state_dir: changing the state directory needs a daemon restart; the rest of this edit is not applied",
                    self.config_path.display()
                );
                tracing::error!("{msg}");
                (caps_json(&self.config), Some(msg), false)
            }
            Ok(new) => {
                let changed = new != *self.config;
                if changed {
                    tracing::info!("reloaded {}", self.config_path.display());
                    self.config = Arc::new(new);
                    self.sweep_removed = true;
                }
                (caps_json(&self.config), None, changed)
            }
            Err(errors) => {
                let msg = errors.to_string();
                tracing::error!("reload refused, the last good config stays in force: {msg}");
                (caps_json(&self.config), Some(msg), false)
            }
        };
        let current = error.is_none();
        self.config_file.confirmed = settled.filter(|_| current);
        self.config_file.refused = settled.filter(|_| !current);
        if !always && !applied_new && error == self.config_file.recorded_error {
            return current;
        }
        self.config_file.recorded_error.clone_from(&error);
        let store = self.store.clone();
        let epoch = self.epoch;
        let res = tokio::task::spawn_blocking(move || {
            store.set_daemon_config(epoch, &caps, error.as_deref(), now_ms())
        })
        .await
        .expect("set_daemon_config panicked");
        if let Err(e) = res {
            tracing::warn!(error = %e, "could not record the reload in the database");
        }
        current
    }

    /// Ends the queued runs `unknown` (listed by an EVAL: runs of projects missing from the
    /// config in force), but only once the file, read *after* they were listed, confirms the
    /// projects are gone: a run queued by a command that read a newer file than the daemon's
    /// must wait for that file, never be ended as a removed project's. While the file settles
    /// the runs wait (and are looked at again once it has); while it is invalid they wait for a
    /// valid one.
    pub(super) async fn end_removed(&mut self, unknown: Vec<(RunId, String)>) {
        match self.config_view().await {
            ConfigView::Current => {}
            ConfigView::Settling { left, .. } => {
                self.sweep_removed = true;
                self.wake_within(left);
                return;
            }
            ConfigView::Invalid => return,
        }
        // The view may have just applied a newer file: what it knows is no longer unknown, and
        // its runs may start at once.
        let listed = unknown.len();
        let gone: Vec<(RunId, String)> = unknown
            .into_iter()
            .filter(|(_, p)| !self.config.projects.contains_key(p))
            .collect();
        if gone.len() < listed {
            let _ = self.events.send(Event::Nudge);
        }
        if gone.is_empty() {
            return;
        }
        let ids: Vec<RunId> = gone.iter().map(|(id, _)| *id).collect();
        let store = self.store.clone();
        let res = tokio::task::spawn_blocking(move || {
            store.cancel_queued_runs(&ids, "project removed", now_ms())
        })
        .await
        .expect("cancel_queued_runs panicked");
        match res {
            Ok(done) => {
                for (id, project) in gone.iter().filter(|(id, _)| done.contains(id)) {
                    tracing::info!(
                        run = id,
                        project = %project,
                        config = %self.config_path.display(),
                        "run ended: its project is no longer in the config (project removed)"
                    );
                }
            }
            Err(e) => {
                // Nothing was written; the next EVAL lists them again.
                tracing::warn!(error = %e, "could not end the queued runs of removed projects");
                self.sweep_removed = true;
            }
        }
    }

    /// Makes the loop wake within `wait`, to look again at something left for later.
    pub(super) fn wake_within(&mut self, wait: Duration) {
        let at = Instant::now() + wait;
        self.next_due = Some(self.next_due.map_or(at, |d| d.min(at)));
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

    /// Only an unsettled file holding another config holds up decisions on the config.
    #[test]
    fn only_an_unsettled_different_file_holds_decisions_up() {
        let left = Duration::from_millis(50);
        assert!(ConfigView::Current.usable());
        assert!(ConfigView::Invalid.usable());
        assert!(ConfigView::Settling { same: true, left }.usable());
        assert!(!ConfigView::Settling { same: false, left }.usable());
        assert_eq!(
            ConfigView::Settling { same: true, left }.settle_left(),
            Some(left)
        );
        assert_eq!(ConfigView::Current.settle_left(), None);
    }
}
