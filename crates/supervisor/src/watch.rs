//! Noticing edits of fleet.toml without being told: a file watcher (inotify on Linux) on the
//! file's folder, falling back to polling when the watcher cannot be set up.
//!
//! The folder, not the file, is watched: editors that save by writing a new file and renaming it
//! over the old one (vim, `sed -i`) replace the inode a file watch would follow. A change only
//! asks for a reload; the reload itself parses and validates, so a half-written file seen
//! mid-save is just a refused edit, tried again at the next change.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

/// How often the polling fallback looks at the folder.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// A running watcher; dropping it stops watching.
pub struct ConfigWatcher {
    _inner: Box<dyn Watcher + Send>,
    /// True when the polling fallback is in use.
    pub polling: bool,
}

/// Watches `config` and calls `on_change` (from the watcher's own thread) whenever the file may
/// have changed: written, truncated, created, renamed over or removed.
///
/// Errors: neither the native watcher nor the polling fallback could watch the folder (for
/// instance, it does not exist).
pub fn watch(
    config: &Path,
    on_change: impl Fn() + Send + Clone + 'static,
) -> notify::Result<ConfigWatcher> {
    let file_name = config.file_name().map(|n| n.to_os_string());
    let folder: PathBuf = match config.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let handler = {
        let on_change = on_change.clone();
        let file_name = file_name.clone();
        move |res: notify::Result<notify::Event>| {
            let Ok(event) = res else { return };
            if event.kind.is_access() {
                return;
            }
            let ours = event
                .paths
                .iter()
                .any(|p| p.file_name().map(|n| n.to_os_string()) == file_name);
            if ours {
                on_change();
            }
        }
    };
    match notify::recommended_watcher(handler.clone()).and_then(|mut w| {
        w.watch(&folder, RecursiveMode::NonRecursive)?;
        Ok(w)
    }) {
        Ok(w) => Ok(ConfigWatcher {
            _inner: Box::new(w),
            polling: false,
        }),
        Err(e) => {
            tracing::warn!(error = %e, "file watching unavailable; polling fleet.toml every second");
            let mut w = notify::PollWatcher::new(
                handler,
                notify::Config::default()
                    .with_poll_interval(POLL_INTERVAL)
                    .with_compare_contents(true),
            )?;
            w.watch(&folder, RecursiveMode::NonRecursive)?;
            Ok(ConfigWatcher {
                _inner: Box::new(w),
                polling: true,
            })
        }
    }
}
