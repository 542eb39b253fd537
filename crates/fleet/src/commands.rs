//! The short commands over the database: `enqueue`, `runs`, `status`, `cancel`, `reload` and
//! `check`. Each prints through [`crate::console`], so a reader that leaves early ends the
//! command quietly.

use std::path::Path;

use store::{CancelOutcome, NewRun, RunFilter, RunStatus, Trigger};
use supervisor::control::{self, Nudge};
use supervisor::statedir::StateDir;

use crate::cli::{
    invalid, load, load_for_reading, open_existing_at, open_store, state_of, Failure, Result,
};
use crate::{console, output};

/// `fleet enqueue PROJECT`: queues a run and prints its id.
pub fn enqueue(path: &Path, project: &str, priority: i64) -> Result<()> {
    let config = load(path)?;
    let Some(p) = config.projects.get(project) else {
        return Err(Failure::input(format!(
            "unknown project {project:?} (not in {})",
            path.display()
        )));
    };
    let store = open_store(&config)?;
    let id = store
        .enqueue(
            &NewRun {
                project: project.to_string(),
                namespace: p.namespace.clone(),
                priority,
                trigger: Trigger::Manual,
                occurrence: None,
                not_before: 0,
                ..Default::default()
            },
            store::now_ms(),
        )
        .map_err(Failure::action)?;
    // The run is queued whether or not anyone reads its id: the nudge goes out either way.
    let printed = console::println(id);
    // A hint only: without a daemon the run waits in the queue for one.
    let _ = control::send(&StateDir::new(&config.state_dir).socket_path(), Nudge::Eval);
    printed
}

/// `fleet runs`: a table, or one JSON array.
pub fn runs(
    path: &Path,
    project: Option<String>,
    status: Option<String>,
    limit: u32,
    json: bool,
) -> Result<()> {
    let status = status
        .map(|s| s.parse::<RunStatus>().map_err(Failure::input))
        .transpose()?;
    let state = state_of(path)?;
    let runs = match open_existing_at(&state)? {
        Some(store) => store
            .list_runs(&RunFilter {
                project,
                status,
                limit: Some(limit),
            })
            .map_err(Failure::action)?,
        None => Vec::new(),
    };
    if json {
        console::println(output::runs_json(&runs))
    } else {
        console::println(output::runs_table(&runs))
    }
}

/// `fleet status`: the daemon, the config in force, occupancy.
pub fn status(path: &Path, json: bool) -> Result<()> {
    let (state, config, errors) = load_for_reading(path)?;
    let holder = state
        .daemon_holder()
        .map_err(|e| Failure::action(format!("{}: {e}", state.lock_path().display())))?;
    let (row, active, schedules) = match open_existing_at(&state)? {
        Some(store) => (
            store.daemon_row().map_err(Failure::action)?,
            store.active_runs().map_err(Failure::action)?,
            store.schedules().map_err(Failure::action)?,
        ),
        None => (None, Vec::new(), Vec::new()),
    };
    let report = output::Status::new(
        config.as_ref(),
        errors.as_ref(),
        &state,
        path,
        holder,
        row,
        &active,
    )
    .with_schedules(&schedules);
    if json {
        console::println(report.json())?;
    } else {
        console::print(&report.text())?;
    }
    match errors {
        // Shown above too (`config_errors`); the exit status and the one-line message still
        // say the file is invalid.
        Some(errors) => Err(invalid(&errors).reported()),
        None => Ok(()),
    }
}

/// `fleet cancel RUN`.
pub fn cancel(path: &Path, run: i64) -> Result<()> {
    let state = state_of(path)?;
    let Some(store) = open_existing_at(&state)? else {
        return Err(Failure::input(format!("unknown run id {run}")));
    };
    let outcome = store
        .request_cancel(run, "cancelled by operator", store::now_ms())
        .map_err(|e| match e {
            store::StoreError::UnknownRun(_) => Failure::input(format!("unknown run id {run}")),
            other => Failure::action(other),
        })?;
    match outcome {
        CancelOutcome::Cancelled => {
            // The nudge goes first: the cancel is done whether or not anyone reads the answer.
            let _ = control::send(&state.socket_path(), Nudge::Eval);
            console::println(format_args!("run {run} cancelled"))
        }
        CancelOutcome::Requested => {
            if control::send(&state.socket_path(), Nudge::Eval).is_ok() {
                console::println(format_args!(
                    "run {run}: cancel requested; it ends `cancelled` once its process is gone"
                ))
            } else {
                console::println(format_args!(
                    "run {run}: cancel requested; no daemon is running, it is stopped when one starts"
                ))
            }
        }
        CancelOutcome::AlreadyFinished(status) => Err(Failure::action(format!(
            "run {run} already ended: {status}"
        ))),
    }
}

/// `fleet reload`: asks the daemon to re-read fleet.toml.
pub fn reload(path: &Path) -> Result<()> {
    let (state, _, errors) = load_for_reading(path)?;
    let socket = state.socket_path();
    // Sent even for an invalid file: the daemon then records the refusal for `fleet status`.
    control::send(&socket, Nudge::Reload)
        .map_err(|e| Failure::action(format!("no daemon answers on {}: {e}", socket.display())))?;
    if let Some(errors) = errors {
        // The daemon keeps its last good config and records the refusal.
        return Err(invalid(&errors));
    }
    console::println("reload requested")
}

/// `fleet check`: the restart-safety checker.
pub fn check(path: &Path, json: bool) -> Result<()> {
    let state = state_of(path)?;
    let Some(store) = open_existing_at(&state)? else {
        // Say so: a mistyped state_dir must not pass for a clean install.
        let note = format!(
            "nothing to check: no database at {}",
            state.db_path().display()
        );
        return if json {
            console::println(output::check_nothing_json(&note))
        } else {
            console::println(format_args!("ok: {note}"))
        };
    };
    let report =
        supervisor::check::check(&state, &store, store::now_ms()).map_err(Failure::action)?;
    if json {
        console::println(output::check_json(&report))?;
    } else {
        console::print(&output::check_text(&report))?;
    }
    if report.ok() {
        Ok(())
    } else {
        let n = report.violations.len();
        Err(Failure::action(format!(
            "check found {n} violation{}",
            if n == 1 { "" } else { "s" }
        ))
        .reported())
    }
}
