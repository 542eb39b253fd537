//! The run-file half of `fleet check` that reads records: a file that cannot be read becomes a
//! finding and the check goes on (one bad file must not hide what the others say), and a
//! terminal run's exit record is compared with what the database recorded of its end. It only
//! reads, and never decides what a record means: that is `settle::outcome`'s, the same rule the
//! daemon applied when it wrote the end.

use std::collections::BTreeSet;
use std::io;
use std::path::Path;

use runrecord::{BadLine, Records, RunFiles};
use store::{Run, RunId, RunStatus};

use super::report::{Report, Violation, ViolationKind};
use crate::settle;

/// `result`'s value, or `None` after recording an [`ViolationKind::UnreadableFile`] finding for
/// run `run` naming `path` (an error that names its file already, as a bad record line does, is
/// not prefixed with it again: a bad line reads the same whichever reader met it, so the
/// report's de-duplication keeps one finding per line).
pub(super) fn readable<T>(
    report: &mut Report,
    run: RunId,
    path: &Path,
    result: io::Result<T>,
) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            let said = e.to_string();
            let bad_line = e.get_ref().is_some_and(|inner| inner.is::<BadLine>());
            let message = if bad_line || said.contains(&path.display().to_string()) {
                said
            } else {
                format!("cannot read {}: {said}", path.display())
            };
            unreadable(report, run, message);
            None
        }
    }
}

fn unreadable(report: &mut Report, run: RunId, message: String) {
    report.violations.push(Violation {
        kind: ViolationKind::UnreadableFile,
        run_id: Some(run),
        message,
    });
}

/// The records of the run `dir`, every line of its records that is not a record reported
/// as an [`ViolationKind::UnreadableFile`] finding; `None` (reported too) when the run's records
/// cannot be read at all.
pub(super) fn records(report: &mut Report, dir: &RunFiles) -> Option<Records> {
    let records = readable(report, dir.id(), &dir.lock_path(), dir.records())?;
    for bad in &records.bad {
        unreadable(report, dir.id(), bad.to_string());
    }
    Some(records)
}

/// Whether `records` name one of `claims` (the tokens a run was claimed under): a claim's
/// tombstone, or its `started`, `running` or `exit` record.
pub(super) fn names_a_claim(records: &Records, claims: &BTreeSet<u64>) -> bool {
    let started = records
        .started
        .iter()
        .flat_map(|s| std::iter::once(s.token).chain(s.history.iter().copied()));
    let others = [
        records.running.as_ref().map(|r| r.token),
        records.exit.as_ref().map(|e| e.token),
    ];
    started
        .chain(others.into_iter().flatten())
        .chain(records.tombstones.iter().copied())
        .any(|t| claims.contains(&t))
}

/// Reports an [`ViolationKind::ExitRecordMismatch`] when terminal run `run` has an exit record
/// of its last claim that stands for another status, exit code or signal than the database
/// holds: the database's end would then not be the command's real one.
pub(super) fn compare_exit(report: &mut Report, run: &Run, records: &Records) {
    let Some(exit) = records.exit.as_ref().filter(|e| e.token == run.claim_token) else {
        return;
    };
    // A run declared `lost` without its record — its host forgotten by an operator — may have
    // ended otherwise on that host, before the forget (the host was away, its command finished)
    // or after it (the returning host stops it): the forget could not know, and that record
    // cannot contradict it. A record from before any other `lost` end still can (an end that
    // ignored a real exit).
    if store::ended_by_forget(run) {
        return;
    }
    if run.status == RunStatus::Lost
        && matches!((exit.finished_ms(), run.finished_at), (Some(ended), Some(declared)) if ended > declared)
    {
        return;
    }
    let (status, code, signal, _) = settle::outcome(exit);
    if (status, code, signal) == (run.status, run.exit_code, run.signal) {
        return;
    }
    let show = |v: Option<i32>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
    report.violations.push(Violation {
        kind: ViolationKind::ExitRecordMismatch,
        run_id: Some(run.id),
        message: format!(
            "run {} ({}) is {} (exit code {}, signal {}) in the database but its exit record says {} \
             (exit code {}, signal {})",
            run.id,
            run.project,
            run.status,
            show(run.exit_code),
            show(run.signal),
            status,
            show(code),
            show(signal)
        ),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bad line met in another file than the one given (the run's overflow, while the
    /// caller names its segment) is reported in its own words, the same finding `records`
    /// makes of it, not prefixed with the other path.
    #[test]
    fn a_bad_line_is_reported_in_its_own_words() {
        let bad = BadLine {
            path: "/state/runs/7.more".into(),
            line: 1,
            reason: "expected value".into(),
        };
        let mut report = Report::default();
        let got: Option<()> = readable(
            &mut report,
            7,
            Path::new("/state/runs/records-0"),
            Err(bad.to_error()),
        );
        assert!(got.is_none());
        assert_eq!(report.violations.len(), 1);
        assert_eq!(report.violations[0].message, bad.to_string());
    }
}
