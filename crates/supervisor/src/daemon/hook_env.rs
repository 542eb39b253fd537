//! The environment a failure hook's run gets: the failed run's fields, as `FLEET_FAILED_*`.
//!
//! They are read from the failed run's row when the hook's run is spawned (the row is terminal,
//! so the values cannot change in between), and are never stored with the hook's run: a retry of
//! the hook reads them again, the same.

use std::ffi::OsString;
use std::path::Path;

use runrecord::RunFiles;
use store::Run;

/// Every variable this module sets; each is removed from a run's environment when it has no
/// value, so that a daemon itself started by a fleet hook does not pass its own on.
pub const FAILED_VARS: [&str; 6] = [
    "FLEET_FAILED_RUN_ID",
    "FLEET_FAILED_PROJECT",
    "FLEET_FAILED_STATUS",
    "FLEET_FAILED_EXIT_CODE",
    "FLEET_FAILED_SIGNAL",
    "FLEET_FAILED_LOG",
];

/// The environment changes for `run`: for a failure hook's run (`hook_of` set), the failed run's
/// id, project, status, exit code, signal and log path (under `state_dir`'s `runs/`); `failed` is
/// its row, when it could be read (without it, only the id and the log path are known). An exit
/// code or signal the failed run does not have is removed, as is every variable for a run that
/// is not a hook's. A failed run whose command wrote nothing has no log file: an empty one is
/// made then, where the run's files are (not an error if it cannot be), so that the hook can read the path it is given.
pub fn failed_run_env(
    state_dir: &Path,
    run: &Run,
    failed: Option<&Run>,
) -> Vec<(OsString, Option<OsString>)> {
    let values: [Option<String>; 6] = match run.hook_of {
        None => Default::default(),
        Some(id) => [
            Some(id.to_string()),
            failed.map(|f| f.project.clone()),
            failed.map(|f| f.status.to_string()),
            failed.and_then(|f| f.exit_code).map(|c| c.to_string()),
            failed.and_then(|f| f.signal).map(|s| s.to_string()),
            Some(failed_log(state_dir, id)),
        ],
    };
    FAILED_VARS
        .iter()
        .zip(values)
        .map(|(k, v)| (OsString::from(k), v.map(OsString::from)))
        .collect()
}

/// The path of run `id`'s log, made (empty) if the command never wrote one.
fn failed_log(state_dir: &Path, id: store::RunId) -> String {
    let files = RunFiles::new(state_dir, id);
    // Only where the run's files are (another host's run has them there); an error is
    // ignored: the hook still gets the path, and reads nothing there either way.
    if files.exists().unwrap_or(false) {
        let _ = files.open_log();
    }
    files.log_path().display().to_string()
}
