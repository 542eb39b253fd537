//! The paths fleet.toml names, made absolute against the file's own folder.
//!
//! This module owns the one rule for a relative path in the file: it is resolved against the
//! folder the file sits in, never against the daemon's current directory. It only computes
//! paths: it never reads the file, never validates a key and never creates anything on disk.

use std::path::{Path, PathBuf};

/// The folder of `path`, absolute: canonicalized when it exists, else made absolute against the
/// current directory.
pub(super) fn resolve_dir(path: &Path) -> PathBuf {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if let Ok(canon) = std::fs::canonicalize(&parent) {
        return canon;
    }
    match std::path::absolute(&parent) {
        Ok(abs) => abs.components().collect(),
        Err(_) => parent,
    }
}

/// `rel` resolved against the absolute `base`, with `.` components removed.
pub(super) fn resolve_against(base: &Path, rel: &str) -> PathBuf {
    base.join(rel).components().collect()
}
