//! Re-reading fleet.toml while the daemon runs, and recording the caps in force in the daemon's
//! database row (what `fleet status` shows).
//!
//! A reload must never leave the daemon without a config: an edit that does not parse or
//! validate is refused whole and the last good config stays in force (the refusal is recorded
//! for `fleet status`), and an edit that moves the state directory is refused too (that needs a
//! restart, under the new directory's lock). Queued runs of projects the edit removed are ended
//! by the next EVAL, not here.

use std::path::PathBuf;
use std::sync::Arc;

use store::now_ms;

use super::state::Daemon;
use crate::caps::caps_json;
use crate::config::Config;

impl Daemon {
    /// Re-reads the config file; applies it if it is valid and keeps the state directory, and
    /// asks the next EVAL to sweep the queued runs of removed projects. Records the caps in
    /// force and the refusal, if any, in the daemon's row (a failure to record is only logged).
    pub(super) async fn reload_config(&mut self) {
        let path = self.config_path.clone();
        let loaded = tokio::task::spawn_blocking(move || Config::load(&path))
            .await
            .expect("config load panicked");
        let (caps, error) = match loaded {
            Ok(new) if new.state_dir != self.config.state_dir => {
                let msg = format!(
                    "{}: state_dir: changing the state directory needs a daemon restart; the rest of this edit is not applied",
                    self.config_path.display()
                );
                tracing::error!("{msg}");
                (caps_json(&self.config), Some(msg))
            }
            Ok(new) => {
                if new != *self.config {
                    tracing::info!("reloaded {}", self.config_path.display());
                    self.config = Arc::new(new);
                    self.sweep_removed = true;
                }
                (caps_json(&self.config), None)
            }
            Err(errors) => {
                let msg = errors.to_string();
                tracing::error!("reload refused, the last good config stays in force: {msg}");
                (caps_json(&self.config), Some(msg))
            }
        };
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
    }
}

/// Whether the config file at `path` no longer says what `config` says (edited, or unreadable):
/// an edit saved between the command line's read of the file and the watcher's start would
/// otherwise wait for the next edit.
pub(super) async fn stale(path: PathBuf, config: &Config) -> bool {
    let now_on_disk = tokio::task::spawn_blocking(move || Config::load(&path).ok())
        .await
        .expect("config load panicked");
    now_on_disk.as_ref() != Some(config)
}
