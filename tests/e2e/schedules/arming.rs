//! The config header, proof that an EVAL happened, the persisted schedule cursor, and arming a
//! schedule whose only occurrences are a few chosen seconds ahead.

use std::collections::BTreeSet;
use std::time::Duration;

use super::runs::runs_of;
use crate::common::time::rfc3339;
use crate::common::*;

/// The global part of every config here.
pub const HEADER: &str = "max_concurrency = 4\n";

/// A project that succeeds at once, to prove EVALs happen (see [`eval_happened`]).
pub const PROBE: &str = "[projects.probe]\ncommand = [\"true\"]\n";

/// Proof that the running daemon completed an EVAL — including its "fire schedules" step, which
/// comes before the claims — after this call began: a manual run of `probe` is claimed and ends.
pub fn eval_happened(f: &Fleet) {
    let id = f.enqueue("probe");
    f.wait_status(id, "succeeded");
}

/// The persisted cursor and next occurrence of `project`'s schedule (table `schedules`), read
/// read-only; None while there is no row (or no database yet).
pub fn schedule_row(f: &Fleet, project: &str) -> Option<(i64, Option<i64>)> {
    let c = rusqlite::Connection::open_with_flags(
        f.state_dir().join("fleet.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()?;
    c.busy_timeout(Duration::from_secs(5)).ok()?;
    c.query_row(
        "SELECT cursor, next_fire FROM schedules WHERE project = ?1",
        [project],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .ok()
}

/// A 6-field cron expression whose occurrences are exactly the given whole seconds (each minute;
/// the instants must lie within one minute of each other).
pub fn seconds_expr(occ: &[i64]) -> String {
    let secs: BTreeSet<i64> = occ.iter().map(|t| t / 1000 % 60).collect();
    let list: Vec<String> = secs.iter().map(|s| s.to_string()).collect();
    format!("{} * * * * *", list.join(","))
}

/// Arms a schedule: picks whole-second instants `offsets` seconds after a base at least a couple
/// of seconds ahead, writes `config(instants)`, starts a daemon (with `env`) and waits until it
/// persisted `project`'s cursor before the first instant with that instant as the next one.
/// Returns the daemon and the instants, with at least ~400 ms left before the first one. A slow
/// start is retried with a longer lead (a new timetable starts afresh, firing nothing past).
pub fn arm<'a>(
    f: &'a Fleet,
    env: &[(&str, &str)],
    project: &str,
    offsets: &[i64],
    config: impl Fn(&[i64]) -> String,
) -> (Daemon<'a>, Vec<i64>) {
    let mut lead = 2_000;
    for _ in 0..4 {
        let base = (now_ms() + lead) / 1000 * 1000 + 1000;
        let occ: Vec<i64> = offsets.iter().map(|o| base + o * 1000).collect();
        f.write_config(&config(&occ));
        let before = schedule_row(f, project);
        let mut d = f.start_daemon_env(env);
        let ready = loop {
            let late = now_ms() >= occ[0] - 400;
            match schedule_row(f, project) {
                Some((cursor, Some(next))) if next == occ[0] && cursor < occ[0] && !late => {
                    break true
                }
                // The daemon started this timetable (a new cursor, before the first instant)
                // but computed another next occurrence: a product bug, not a slow start.
                Some((cursor, next)) if Some((cursor, next)) != before && cursor < occ[0] => {
                    panic!(
                        "the daemon computed the next occurrence of {project} as {:?}, expected \
                         {} (config:\n{})\n{}",
                        next.map(rfc3339),
                        rfc3339(occ[0]),
                        config(&occ),
                        f.diagnostics()
                    )
                }
                _ if late => break false,
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        if ready {
            return (d, occ);
        }
        d.kill();
        assert!(
            runs_of(f, project).is_empty(),
            "arming the schedule: the daemon was too slow and fired already\n{}",
            f.diagnostics()
        );
        lead *= 2;
    }
    panic!(
        "could not arm the schedule of {project}: the daemon never persisted its cursor in time\n{}",
        f.diagnostics()
    );
}
