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
    // The file as named and, when it is a symlink, the file it points to: an edit of the
    // target must be noticed too. Each is watched through its folder.
    let mut places: Vec<(PathBuf, std::ffi::OsString)> = Vec::new();
    for path in [
        Some(config.to_path_buf()),
        std::fs::canonicalize(config).ok(),
    ]
    .into_iter()
    .flatten()
    {
        let Some(name) = path.file_name().map(|n| n.to_os_string()) else {
            continue;
        };
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !places
            .iter()
            .any(|(f, n)| same_folder(f, &folder) && *n == name)
        {
            places.push((folder, name));
        }
    }
    let names: Vec<std::ffi::OsString> = places.iter().map(|(_, n)| n.clone()).collect();
    let handler = {
        let on_change = on_change.clone();
        move |res: notify::Result<notify::Event>| {
            let Ok(event) = res else { return };
            if event.kind.is_access() {
                return;
            }
            let ours = event
                .paths
                .iter()
                .any(|p| p.file_name().is_some_and(|n| names.iter().any(|m| m == n)));
            if ours {
                on_change();
            }
        }
    };
    let watch_all = |w: &mut dyn Watcher| -> notify::Result<()> {
        for (folder, _) in &places {
            w.watch(folder, RecursiveMode::NonRecursive)?;
        }
        Ok(())
    };
    match notify::recommended_watcher(handler.clone()).and_then(|mut w| {
        watch_all(&mut w)?;
        Ok(w)
    }) {
        Ok(w) => Ok(ConfigWatcher {
            _inner: Box::new(w),
        }),
        Err(e) => {
            tracing::warn!(error = %e, "file watching unavailable; polling fleet.toml every second");
            let mut w = notify::PollWatcher::new(
                handler,
                notify::Config::default()
                    .with_poll_interval(POLL_INTERVAL)
                    .with_compare_contents(true),
            )?;
            watch_all(&mut w)?;
            Ok(ConfigWatcher {
                _inner: Box::new(w),
            })
        }
    }
}

/// Whether two folder paths name the same folder.
fn same_folder(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
