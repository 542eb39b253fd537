//! `fleet status [--json]`: whether a daemon holds the state directory and whether its loop
//! turns ([`liveness`]), the config in force, occupancy against every cap ([`report`]); exit 0
//! (evaluating), 1 (stuck) or 3 (no daemon). It works while fleet.toml is invalid, as long as
//! the file still says where the state directory is: the report then shows the file's errors
//! (and stderr the first as a warning), and the exit status is still the daemon's — a typo in
//! the file must not fail a health check while the daemon runs on its last good config.

mod liveness;
mod report;

use std::path::Path;

use crate::console;
use crate::ctx::{self, Ctx, IfInvalid};
use crate::failure::{Failure, Result};

use liveness::Liveness;

/// What `fleet status` was asked.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The daemon row of this host among the hosts sharing the database. The running daemon's row
/// is found first by its pid (`holder`, from the state directory's lock), because a daemon
/// started with `--host NAME` runs under a name its config may not give; among rows with that
/// pid (hosts on other machines may reuse it) the one whose config path is this one wins.
/// Without a daemon: the row of `host` (the config's name); without a name, the host that
/// took over last.
fn this_host_row(
    store: &store::Store,
    host: Option<&str>,
    holder: Option<i32>,
    path: &Path,
) -> Result<Option<store::DaemonRow>> {
    let Some(host) = host else {
        return store.daemon_row().map_err(Failure::action);
    };
    let rows: Vec<store::HostRow> = store
        .hosts()
        .map_err(Failure::action)?
        .into_iter()
        .filter(|h| h.forgotten_at.is_none())
        .collect();
    let same_file = |p: &str| {
        let canon = |p: &Path| std::fs::canonicalize(p).ok();
        canon(Path::new(p)).is_some_and(|c| Some(c) == canon(path))
    };
    let by_pid: Vec<&store::HostRow> = rows.iter().filter(|h| Some(h.pid) == holder).collect();
    let found = match by_pid.as_slice() {
        [one] => Some(*one),
        many => many
            .iter()
            .find(|h| same_file(&h.config_path))
            .copied()
            .or_else(|| many.iter().find(|h| h.name == host).copied()),
    }
    .or_else(|| rows.iter().find(|h| h.name == host));
    Ok(found.cloned().map(store::DaemonRow::from))
}

/// `fleet status`: the daemon, the config in force, occupancy.
pub fn status(ctx: &Ctx, args: &StatusArgs) -> Result<()> {
    let json = args.json;
    let state = ctx.state(IfInvalid::Warn)?;
    let (config, errors) = (ctx.config_if_valid(), ctx.loaded().err());
    let path = ctx.path();
    let holder = state.daemon_holder().map_err(|e| {
        // A file where the state directory should be is bad input (exit 2), as for every
        // other command.
        if e.kind() == std::io::ErrorKind::NotADirectory {
            Failure::input(format!(
                "{}: not a directory (a file is where the state directory should be)",
                state.root().display()
            ))
        } else {
            Failure::action(format!("{}: {e}", state.lock_path().display()))
        }
    })?;
    // This host's name: the running daemon's (its row, found by its pid), else the one the
    // last daemon here ran as, else the config's `host` (or the machine's hostname).
    let mut this_host = state
        .recorded_host()
        .or_else(|| config.map(|c| c.host.clone()));
    let (row, active, schedules, pauses, published) = match ctx::open_existing_for_status(&state)? {
        Some(store) => (
            this_host_row(&store, this_host.as_deref(), holder, path)?,
            store.active_rows().map_err(Failure::action)?,
            store.schedules().map_err(Failure::action)?,
            store.paused().map_err(Failure::action)?,
            store.published_config().map_err(Failure::action)?,
        ),
        None => (
            None,
            store::RunRows::default(),
            Vec::new(),
            store::Pauses::default(),
            None,
        ),
    };
    // An active row another program wrote with a value fleet cannot read is not in the report
    // (the daemon counts its seat all the same): said on stderr, whatever the exit status.
    for bad in &active.unreadable {
        console::eprintln(format_args!(
            "fleet: {} (an active run left out of this report; the daemon counts its seat)",
            bad.error
        ));
    }
    if let Some(name) = row.as_ref().map(|r| r.host.clone()) {
        this_host = Some(name);
    }
    let liveness = Liveness::probe(&state, holder);
    // With no daemon running here, the caps and schedules in force on a shared database are
    // the published config's, not this file's: every other host applies them, and this
    // host's daemon applies them too when it starts (it publishes its file only when nothing
    // is published yet). A published text this build cannot use leaves the file's.
    let in_force = match (holder, &published, config) {
        (None, Some(p), Some(here)) => config::Config::published_here(&p.text, path, here).ok(),
        _ => None,
    };
    let config_in_force = in_force.as_ref().or(config);
    let report = report::Status::new(
        config_in_force,
        errors,
        &state,
        path,
        holder,
        row,
        report::Active {
            runs: &active.runs,
            this_host: this_host.as_deref(),
        },
    )
    .with_schedules(&schedules, config_in_force)
    .with_liveness(&liveness)
    .with_pauses(&pauses)
    .with_host(
        this_host.as_deref(),
        published.as_ref(),
        std::fs::read(path).ok(),
    )
    .with_clock(store::db_clock::offset_ms());
    if json {
        console::println(report.json())?;
    } else {
        console::print(&report.text())?;
    }
    // An invalid file was said on stderr (and is in the report); the exit status is the
    // daemon's alone, for scripts and health checks.
    match liveness {
        Liveness::Running => Ok(()),
        // The report above says it all; the one-line message and the exit status are for
        // scripts and service managers (`systemctl is-active` uses 3 the same way).
        Liveness::Stopped => Err(Failure {
            code: liveness.exit_code(),
            message: format!("no daemon holds {}", state.root().display()),
            reported: json,
        }),
        Liveness::Stuck(ref reason) => Err(Failure {
            code: liveness.exit_code(),
            message: format!("the daemon is stuck: {reason}"),
            reported: json,
        }),
    }
}
