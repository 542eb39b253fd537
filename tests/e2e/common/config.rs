//! Text for fleet.toml: TOML strings and argv arrays, shell words, and replacing the file the
//! way editors do. Pure text and file writes: nothing here talks to a daemon.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Fleet;

/// A string as a TOML basic string (JSON string escapes are valid TOML escapes).
pub fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// An argv as a TOML array.
pub fn toml_argv(argv: &[&str]) -> String {
    format!(
        "[{}]",
        argv.iter()
            .map(|a| toml_str(a))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `sh -c SCRIPT` as a TOML array.
pub fn sh(script: &str) -> String {
    toml_argv(&["sh", "-c", script])
}

/// The value of `key=` in a systemd unit's text (the last one, as systemd reads it).
pub fn unit_value<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .next_back()
}

/// A path as a single-quoted shell word. Panics on a path holding a quote (the temporary
/// folders never do).
pub fn shell_quote(p: &Path) -> String {
    let s = p.display().to_string();
    assert!(!s.contains('\''), "path must not contain a quote: {s}");
    format!("'{s}'")
}

impl Fleet {
    /// Replaces fleet.toml in place (truncate and write). Panics if it cannot be written.
    pub fn write_config(&self, toml: &str) {
        std::fs::write(&self.config, toml).expect("write fleet.toml");
    }

    /// Replaces fleet.toml the way vim and `sed -i` do: a new file in the same folder, renamed
    /// over the old one, so a watcher never sees a half-written file. Panics if it cannot.
    pub fn replace_config(&self, text: &str) {
        static N: AtomicU64 = AtomicU64::new(0);
        let tmp = self.file(&format!(
            ".fleet.toml.tmp-{}",
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::write(&tmp, text).expect("write the temporary config");
        std::fs::rename(&tmp, &self.config).expect("rename over fleet.toml");
    }
}
