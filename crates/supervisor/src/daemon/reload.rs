//! Re-reading fleet.toml while the daemon runs; knowing whether the config in force is what the
//! file says *now* ([`config_view`](super::reload::config_view)); and recording the caps in force in the daemon's
//! database row (what `fleet status` shows).
//!
//! A reload must never leave the daemon without a config: an edit that does not parse or
//! validate is refused whole and the last good config stays in force (the refusal is recorded
//! for `fleet status`), and an edit that moves the state directory is refused too (that needs a
//! restart, under the new directory's lock).
//!
//! The daemon's config may be older than the file: the watcher reloads only once an edit has
//! settled ([`RELOAD_SETTLE`](super::config_file::RELOAD_SETTLE)), and may be off. A command
//! that read the newer file (`fleet enqueue` of a project just added) can act before the daemon
//! has caught up. So every step that ends, skips or refuses something on the strength of the
//! config first asks [`config_view`](super::reload::config_view), which compares the file with what the config was
//! read from, and reads it again (applying it) when it changed and has settled. Such a step must
//! never run on a view that is not [`ConfigView::Current`] (ending queued runs of an unknown
//! project) or at least [`ConfigView::usable`] (retry decisions, schedule firing).

use std::sync::Arc;
use std::time::Duration;

use store::{now_ms, RunId};
use tokio::time::Instant;

use super::config_file::{FileRead, FileStamp, SETTLE_AT_MOST};
use super::events::Event;
use super::hosts::publish_local;
use super::state::Daemon;
use crate::caps::caps_json;

/// What the file says now, compared with the config in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConfigView {
    /// The file has settled and says exactly what the config in force says.
    Current,
    /// The version of the file read now has not been found unchanged for
    /// [`RELOAD_SETTLE`](super::config_file::RELOAD_SETTLE) yet: what it will say is not known. `same`: read now, it says what the config in force
    /// says. `left`: until it settles.
    Settling {
        /// Its content, read now, is the config in force.
        same: bool,
        /// How long until it may have settled.
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

/// Why the file is read again. On a shared database this decides whether the local file is
/// published: an operator's explicit reload publishes it whenever it differs from the published
/// one; an edit seen by the watcher only when the file's content (its digest, never its mtime)
/// changed since this daemon last read it, so a `touch` or a rewrite of the same bytes on a host
/// whose file lags publishes nothing; a look taken to answer [`config_view`](super::reload::config_view) counts as
/// a watcher's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reload {
    /// `fleet reload` or SIGHUP.
    Asked,
    /// The watcher saw the file change.
    Edited,
    /// A look for [`config_view`](super::reload::config_view).
    Look,
}

/// Re-reads the config file; applies it if it is valid and keeps the state directory, and
/// asks the next EVAL to sweep the queued runs of removed projects. Records the caps in
/// force and the refusal, if any, in the daemon's row (a failure to record is only logged).
///
/// A version of the file that has not settled ([`ConfigFile::settle`]: found unchanged for
/// [`RELOAD_SETTLE`](super::config_file::RELOAD_SETTLE); a tool may be writing it still) is
/// not applied: half a file parses as a config too (an empty one is valid), and on a shared
/// database it would be published. Returns how long to wait before reading it again, then;
/// `None` once it was read and applied (or refused).
pub(super) async fn reload_config(d: &mut Daemon, how: Reload) -> Option<Duration> {
    let path = d.setup.config_path.clone();
    let host = d.config.current.host.clone();
    let read = tokio::task::spawn_blocking(move || FileRead::of(&path, &host))
        .await
        .expect("config load panicked");
    match d.config.file.settle(&read, Instant::now()) {
        Ok(stamp) => {
            apply_read(d, read, stamp, how).await;
            None
        }
        Err(left) => Some(left.max(Duration::from_millis(10))),
    }
}

/// Whether the config in force is what the file says now. Costs one `stat` when the file
/// is unchanged since it was last read settled. A file that changed and has settled is read
/// and applied (or refused) here, as a reload would, so that the answer is about the file
/// as it is now; one still changing is left to settle (the caller waits
/// [`ConfigView::settle_left`] and asks again).
pub(super) async fn config_view(d: &mut Daemon) -> ConfigView {
    let path = d.setup.config_path.clone();
    let (confirmed, refused) = (d.config.file.confirmed, d.config.file.refused);
    let host = d.config.current.host.clone();
    let read = tokio::task::spawn_blocking(move || match FileStamp::of(&path) {
        Ok(s) if Some(s) == confirmed => Ok(ConfigView::Current),
        Ok(s) if Some(s) == refused => Ok(ConfigView::Invalid),
        _ => Err(Box::new(FileRead::of(&path, &host))),
    })
    .await
    .expect("config read panicked");
    let read = match read {
        Ok(view) => {
            d.config.file.settled();
            return view;
        }
        Err(read) => *read,
    };
    let left = match d.config.file.settle(&read, Instant::now()) {
        Ok(stamp) => {
            d.config.file.settled();
            return if apply_read(d, read, stamp, Reload::Look).await {
                ConfigView::Current
            } else {
                ConfigView::Invalid
            };
        }
        Err(left) => left,
    };
    let since = *d
        .config
        .file
        .settling_since
        .get_or_insert_with(Instant::now);
    if since.elapsed() > SETTLE_AT_MOST {
        if !std::mem::replace(&mut d.config.file.unsettled_logged, true) {
            tracing::warn!(
                config = %d.setup.config_path.display(),
                "the config file keeps changing; deciding with the config in force, and ending nothing on its strength"
            );
        }
        return ConfigView::Invalid;
    }
    ConfigView::Settling {
        same: matches!(&read.loaded, Ok(c) if c == &*d.config.current),
        left,
    }
}

/// Applies what one read of the file found (see [`reload_config`](super::reload::reload_config)), a
/// version that has settled, and remembers its stamp (`settled`; `None`: there was no file). Returns whether the config in force is now
/// what the read found. The daemon's row is rewritten for every reload asked for
/// (`always`: `fleet reload`, SIGHUP, an edit seen by the watcher), and otherwise only when
/// what it shows changes (the config applied, or a refusal made or cleared): a look taken
/// for [`config_view`](super::reload::config_view) alone must not pass for a reload in `fleet status`.
async fn apply_read(
    d: &mut Daemon,
    read: FileRead,
    settled: Option<FileStamp>,
    how: Reload,
) -> bool {
    let always = how != Reload::Look;
    let shared = d.setup.state.database().is_some();
    if shared && how != Reload::Asked {
        // Shared database: the config in force is the published one. A read that finds
        // the last valid text taken (a `touch`, the same bytes written again, or a refused
        // edit undone) is no edit: nothing to apply nor to publish — on a host whose file
        // lags the published config, publishing it would revert the whole fleet.
        if read.digest.is_some() && read.digest == d.config.local_digest {
            if how == Reload::Edited {
                tracing::info!(
                    config = %d.setup.config_path.display(),
                    "the config file was written but its content is unchanged: nothing to apply or publish"
                );
            }
            d.config.file.confirmed = settled;
            d.config.file.refused = None;
            if d.config.file.recorded_error.take().is_some() {
                // The refused edit was undone: its error leaves the daemon's row.
                record_reload(d, None).await;
            }
            return true;
        }
    }
    if shared && read.loaded.is_ok() {
        // Only a valid text counts as the last one taken: an invalid edit in between must
        // not make the return to the valid text look like an edit.
        d.config.local_digest.clone_from(&read.digest);
    }
    if !d.setup.host_flag
        && read
            .file_host
            .as_ref()
            .is_some_and(|h| *h != d.config.current.host)
    {
        // The name says which runs are this host's: it must not change while they run.
        tracing::warn!(
            "{}: host: changing it needs a daemon restart; this daemon keeps the name {}",
            d.setup.config_path.display(),
            d.config.current.host
        );
    }
    let text = read.text;
    let (caps, error, applied_new) = match read.loaded {
        Ok(new) if new.state_dir != d.config.current.state_dir => {
            let msg = format!(
                "{}: state_dir: changing the state directory needs a daemon restart; the rest of this edit is not applied",
                d.setup.config_path.display()
            );
            tracing::error!("{msg}");
            (caps_json(&d.config.current), Some(msg), false)
        }
        Ok(new) => {
            let changed = new != *d.config.current;
            if new.http_listen != d.config.current.http_listen {
                // The listener was bound at start, and rebinding it at a reload could fail
                // with no one to tell but the log: a restart is the one place it is
                // checked.
                tracing::warn!(
                    "{}: http_listen: changing it needs a daemon restart; the HTTP listener stays where it was bound",
                    d.setup.config_path.display()
                );
            }
            if new.log_format != d.config.current.log_format {
                // The subscriber (and the shims' shape) was set up once, at start.
                tracing::warn!(
                    "{}: log_format: changing it needs a daemon restart; the log keeps the shape it started with",
                    d.setup.config_path.display()
                );
            }
            if changed {
                tracing::info!("reloaded {}", d.setup.config_path.display());
                d.config.current = Arc::new(new);
                d.report.observed.set_config(d.config.current.clone());
                d.config.sweep_removed = true;
            }
            (caps_json(&d.config.current), None, changed)
        }
        Err(errors) => {
            let msg = errors.to_string();
            // Once per refusal, on one line: the same file read again (the watcher and a
            // `fleet reload` of one edit, a SIGHUP) says nothing new.
            if d.config.file.recorded_error.as_deref() == Some(msg.as_str()) {
                tracing::debug!("reload refused again, for the same errors");
            } else {
                tracing::error!(
                    "reload refused, the last good config stays in force: {}",
                    msg.replace('\n', "; ")
                );
            }
            (caps_json(&d.config.current), Some(msg), false)
        }
    };
    let current = error.is_none();
    d.config.file.confirmed = settled.filter(|_| current);
    d.config.file.refused = settled.filter(|_| !current);
    if !always && !applied_new && error == d.config.file.recorded_error {
        return current;
    }
    d.config.file.recorded_error.clone_from(&error);
    record_reload_caps(d, caps, error).await;
    if current {
        // An operator's act on this host (a reload asked for, or new content in its
        // file): its file becomes the fleet's next version unless it is the published one.
        publish_local(d, true, text).await;
    }
    current
}

/// Records in the daemon's row the caps in force and the last reload's error (`None`: the
/// last reload was good), as `fleet status` shows them.
async fn record_reload(d: &mut Daemon, error: Option<String>) {
    let caps = caps_json(&d.config.current);
    record_reload_caps(d, caps, error).await;
}

/// [`record_reload`](super::reload::record_reload) with the caps given. A failure is logged.
async fn record_reload_caps(d: &mut Daemon, caps: String, error: Option<String>) {
    let store = d.setup.store.clone();
    let epoch = d.host.epoch;
    let res = tokio::task::spawn_blocking(move || {
        store.set_daemon_config(epoch, &caps, error.as_deref(), now_ms())
    })
    .await
    .expect("set_daemon_config panicked");
    if let Err(e) = res {
        tracing::warn!(error = %e, "could not record the reload in the database");
    }
}

/// Ends the queued runs `unknown` (listed by an EVAL: runs of projects missing from the
/// config in force), but only once the file, read *after* they were listed, confirms the
/// projects are gone: a run queued by a command that read a newer file than the daemon's
/// must wait for that file, never be ended as a removed project's. While the file settles
/// the runs wait (and are looked at again once it has); while it is invalid they wait for a
/// valid one.
pub(super) async fn end_removed(d: &mut Daemon, unknown: Vec<(RunId, String)>) {
    match config_view(d).await {
        ConfigView::Current => {}
        ConfigView::Settling { left, .. } => {
            d.config.sweep_removed = true;
            wake_within(d, left);
            return;
        }
        ConfigView::Invalid => return,
    }
    // The view may have just applied a newer file: what it knows is no longer unknown, and
    // its runs may start at once.
    let listed = unknown.len();
    let gone: Vec<(RunId, String)> = unknown
        .into_iter()
        .filter(|(_, p)| !d.config.current.projects.contains_key(p))
        .collect();
    if gone.len() < listed {
        let _ = d.setup.events.send(Event::Nudge);
    }
    if gone.is_empty() {
        return;
    }
    let ids: Vec<RunId> = gone.iter().map(|(id, _)| *id).collect();
    let store = d.setup.store.clone();
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
                    config = %d.setup.config_path.display(),
                    "run ended: its project is no longer in the config (project removed)"
                );
            }
        }
        Err(e) => {
            // Nothing was written; the next EVAL lists them again.
            tracing::warn!(error = %e, "could not end the queued runs of removed projects");
            d.config.sweep_removed = true;
        }
    }
}

/// Makes the loop wake within `wait`, to look again at something left for later.
pub(super) fn wake_within(d: &mut Daemon, wait: Duration) {
    let at = Instant::now() + wait;
    d.holds.next_due = Some(d.holds.next_due.map_or(at, |d| d.min(at)));
}

#[cfg(test)]
mod tests {
    use super::*;

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
