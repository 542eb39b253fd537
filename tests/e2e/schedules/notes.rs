//! Commands that note what they saw (run id, `FLEET_OCCURRENCE`, attempt, when) in a record
//! file, and reading the notes back.

use std::path::Path;

use crate::common::*;

/// Shell that appends `KIND <run id> <FLEET_OCCURRENCE or none> <attempt> <ns-time>` to `rec`.
pub fn note(kind: &str, rec: &Path) -> String {
    format!(
        "echo {kind} $FLEET_RUN_ID ${{FLEET_OCCURRENCE:-none}} $FLEET_ATTEMPT $(date +%s%N) >> {}",
        shell_quote(rec)
    )
}

/// One line written by [`note`].
#[derive(Debug, Clone)]
pub struct Note {
    /// `start` or `end`.
    pub kind: String,
    /// `$FLEET_RUN_ID`.
    pub run: i64,
    /// `$FLEET_OCCURRENCE`, when set.
    pub occurrence: Option<String>,
    /// `$FLEET_ATTEMPT`.
    pub attempt: i64,
    /// When (nanoseconds since the epoch).
    pub ns: i128,
}

impl Note {
    /// When, in milliseconds since the epoch.
    pub fn ms(&self) -> i64 {
        (self.ns / 1_000_000) as i64
    }
}

/// Every note in `rec` (none while it does not exist); panics on a malformed line.
pub fn read_notes(rec: &Path) -> Vec<Note> {
    std::fs::read_to_string(rec)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "malformed record line {l:?}");
            Note {
                kind: f[0].to_string(),
                run: f[1].parse().unwrap(),
                occurrence: (f[2] != "none").then(|| f[2].to_string()),
                attempt: f[3].parse().unwrap(),
                ns: f[4].parse().unwrap(),
            }
        })
        .collect()
}

/// The `start` notes in `rec`.
pub fn starts(rec: &Path) -> Vec<Note> {
    read_notes(rec)
        .into_iter()
        .filter(|n| n.kind == "start")
        .collect()
}

/// A command that notes its start, waits for `go`, notes its end.
pub fn gated(rec: &Path, go: &Path) -> String {
    sh(&format!(
        "{}; while [ ! -e {} ]; do sleep 0.05; done; {}",
        note("start", rec),
        shell_quote(go),
        note("end", rec)
    ))
}
