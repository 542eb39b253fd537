//! Argument parsing and one function per command.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use store::{CancelOutcome, NewRun, RunFilter, RunStatus, Store, Trigger};
use supervisor::config::{Config, ConfigErrors};
use supervisor::control::{self, Nudge};
use supervisor::statedir::StateDir;

use crate::output;

/// A failure with its exit status: 1 the action failed, 2 bad usage or bad input.
#[derive(Debug)]
pub struct Failure {
    /// 1 or 2.
    pub code: u8,
    /// One line naming what was wrong.
    pub message: String,
}

impl Failure {
    /// Bad input: exit 2.
    pub fn input(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 2,
            message: message.to_string(),
        }
    }

    /// The action failed: exit 1.
    pub fn action(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 1,
            message: message.to_string(),
        }
    }
}

type Result<T> = std::result::Result<T, Failure>;

/// fleet: a crash-safe supervisor for recurring and on-demand jobs on one host.
#[derive(Parser, Debug)]
#[command(name = "fleet", version)]
struct Cli {
    /// The config file (default: $FLEET_CONFIG, else ./fleet.toml).
    #[arg(
        long,
        global = true,
        env = "FLEET_CONFIG",
        default_value = "fleet.toml"
    )]
    config: PathBuf,
    /// Read this state directory instead of the one the config names (runs, status, logs,
    /// cancel, check): they then work even while fleet.toml is broken or missing.
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// `--state-dir`, when given: read-only commands and `cancel` use it instead of the config.
static STATE_DIR_OVERRIDE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the supervisor in the foreground until SIGTERM or SIGINT.
    Daemon,
    /// Check the config; print every error.
    Validate,
    /// Queue a run of PROJECT; prints its run id.
    Enqueue {
        /// The project, as named in fleet.toml.
        project: String,
        /// Higher runs first; equal priorities run in enqueue order.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        priority: i64,
    },
    /// List runs, newest first.
    Runs {
        /// Only this project's runs.
        #[arg(long)]
        project: Option<String>,
        /// Only runs in this status (queued, starting, running, succeeded, failed, timed_out,
        /// cancelled, lost).
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The daemon, the config in force and occupancy against every cap.
    Status {
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A run's combined stdout and stderr.
    Logs {
        /// The run id.
        run: i64,
        /// Keep printing as the run writes, until it ends.
        #[arg(long, short)]
        follow: bool,
    },
    /// Stop a queued or active run.
    Cancel {
        /// The run id.
        run: i64,
    },
    /// Ask the daemon to re-read fleet.toml now.
    Reload,
    /// Restart-safety checker: exit 0 when every invariant holds, 1 listing each violation.
    Check {
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Parses the command line and runs the command.
pub fn main() -> Result<()> {
    let cli = Cli::try_parse().map_err(|e| {
        use clap::error::ErrorKind;
        if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
            let _ = e.print();
            std::process::exit(0);
        }
        let _ = e.print();
        std::process::exit(2);
    })?;
    if let Some(dir) = &cli.state_dir {
        if matches!(
            cli.command,
            Command::Daemon | Command::Enqueue { .. } | Command::Validate
        ) {
            // These act on the config itself; a second source for the state directory could
            // only disagree with it.
            return Err(Failure::input(
                "--state-dir is for runs, status, logs, cancel, check and reload; daemon, enqueue and validate use the config's state_dir",
            ));
        }
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
        let _ = STATE_DIR_OVERRIDE.set(dir);
    }
    match cli.command {
        Command::Daemon => daemon(&cli.config),
        Command::Validate => validate(&cli.config),
        Command::Enqueue { project, priority } => enqueue(&cli.config, &project, priority),
        Command::Runs {
            project,
            status,
            limit,
            json,
        } => runs(&cli.config, project, status, limit, json),
        Command::Status { json } => status(&cli.config, json),
        Command::Logs { run, follow } => logs(&cli.config, run, follow),
        Command::Cancel { run } => cancel(&cli.config, run),
        Command::Reload => reload(&cli.config),
        Command::Check { json } => check(&cli.config, json),
    }
}

fn load(path: &Path) -> Result<Config> {
    Config::load(path).map_err(|errors| invalid(&errors))
}

/// The one-line exit-2 message for an invalid config: its first error, and how many more.
fn invalid(errors: &ConfigErrors) -> Failure {
    let first = errors.0.first().map(|e| e.to_string()).unwrap_or_default();
    let more = errors.0.len().saturating_sub(1);
    if more > 0 {
        Failure::input(format!("{first} (and {more} more; run `fleet validate`)"))
    } else {
        Failure::input(first)
    }
}

/// The state directory: `--state-dir` if given, else the config's; an invalid config is exit 2
/// (docs/REFERENCE.md).
fn state_of(path: &Path) -> Result<StateDir> {
    if let Some(dir) = STATE_DIR_OVERRIDE.get() {
        return Ok(StateDir::new(dir));
    }
    Ok(StateDir::new(load(path)?.state_dir))
}

/// The config for `status` and `reload`, which must work while the file is invalid: `status`
/// shows the refused edit (and then exits 2), `reload` makes the daemon record the refusal.
/// They use the state directory the file names, with a warning.
fn load_for_reading(path: &Path) -> Result<(StateDir, Option<Config>, Option<ConfigErrors>)> {
    let loaded = Config::load(path);
    if let Some(dir) = STATE_DIR_OVERRIDE.get() {
        let (config, errors) = match loaded {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e)),
        };
        return Ok((StateDir::new(dir), config, errors));
    }
    match loaded {
        Ok(config) => Ok((StateDir::new(&config.state_dir), Some(config), None)),
        Err(errors) => match Config::state_dir_of(path) {
            Some(dir) => Ok((StateDir::new(dir), None, Some(errors))),
            None => Err(invalid(&errors)),
        },
    }
}

/// Opens the existing store of a state directory; `None` when nothing was ever queued.
fn open_existing_at(state: &StateDir) -> Result<Option<Store>> {
    state.open_existing_store().map_err(Failure::input)
}

/// Opens the store for a command that writes (creating the state directory if needed).
fn open_store(config: &Config) -> Result<Store> {
    StateDir::new(&config.state_dir)
        .open_store()
        .map_err(Failure::input)
}

fn daemon(path: &Path) -> Result<()> {
    let config = load(path)?;
    // Now, while this process has one thread: the fork server must be forked before the
    // runtime (or anything else) starts threads, and before the daemon lock is taken.
    // FLEET_FORK_SERVER=0 execs every shim instead (slower; for comparison and diagnosis).
    let use_fork_server = match std::env::var_os("FLEET_FORK_SERVER") {
        None => true,
        Some(v) if v == "1" => true,
        Some(v) if v == "0" => false,
        Some(v) => {
            return Err(Failure::input(format!(
                "FLEET_FORK_SERVER must be 0 or 1, not {v:?}"
            )))
        }
    };
    // Signals the daemon relies on (SIGTERM, SIGINT, SIGHUP) must not stay blocked because
    // whoever started it had them blocked: tokio's handlers would never run. The mask is this
    // thread's, the only one yet, so every thread started later inherits the empty mask. A
    // refusal leaves the mask as it was, as it always did.
    let _ = supervisor::sys::signals::unblock_all();
    let fork_server = if use_fork_server {
        supervisor::shim::forkserver::ForkServer::start().map_err(|e| e.to_string())
    } else {
        Err("FLEET_FORK_SERVER=0".to_string())
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let shim_program = std::env::current_exe()
        .map_err(|e| Failure::action(format!("cannot find the fleet binary for the shim: {e}")))?;
    let fork_server = match fork_server {
        Ok(server) => Some(std::sync::Arc::new(server)),
        Err(why) => {
            tracing::warn!("no fork server ({why}): every shim is exec'd");
            None
        }
    };
    let options = supervisor::daemon::DaemonOptions {
        config_path: path.to_path_buf(),
        shim_program,
        fork_server,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::action(format!("cannot start the runtime: {e}")))?;
    let result = runtime.block_on(supervisor::daemon::run(config, options));
    // Shim watchers and adopted-run waiters must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    result.map_err(|e| match e {
        supervisor::daemon::DaemonError::StateDir(
            ref inner @ supervisor::statedir::StateDirError::Unusable { .. },
        ) => Failure::input(inner),
        other => Failure::action(other),
    })
}

fn validate(path: &Path) -> Result<()> {
    match Config::load(path) {
        Ok(config) => {
            println!(
                "{}: ok ({} projects, {} namespaces)",
                path.display(),
                config.projects.len(),
                config.namespaces.len()
            );
            Ok(())
        }
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            Err(Failure::input(format!(
                "{}: {} error{}",
                path.display(),
                errors.0.len(),
                if errors.0.len() == 1 { "" } else { "s" }
            )))
        }
    }
}

fn enqueue(path: &Path, project: &str, priority: i64) -> Result<()> {
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
            },
            store::now_ms(),
        )
        .map_err(Failure::action)?;
    println!("{id}");
    // A hint only: without a daemon the run waits in the queue for one.
    let _ = control::send(&StateDir::new(&config.state_dir).socket_path(), Nudge::Eval);
    Ok(())
}

fn runs(
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
        println!("{}", output::runs_json(&runs));
    } else {
        println!("{}", output::runs_table(&runs));
    }
    Ok(())
}

fn status(path: &Path, json: bool) -> Result<()> {
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
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    match errors {
        // Shown above too; the exit status and the one-line message still say the file is
        // invalid.
        Some(errors) => Err(invalid(&errors)),
        None => Ok(()),
    }
}

fn logs(path: &Path, run: i64, follow: bool) -> Result<()> {
    let state = state_of(path)?;
    let Some(store) = open_existing_at(&state)? else {
        return Err(Failure::input(format!("unknown run id {run}")));
    };
    let record = store.get_run(run).map_err(|e| match e {
        store::StoreError::UnknownRun(_) => Failure::input(format!("unknown run id {run}")),
        other => Failure::action(other),
    })?;
    let log = supervisor::shim::rundir::RunDir::new(state.root(), run).log_path();
    let mut out = std::io::stdout().lock();
    let mut offset = 0u64;
    let mut copy = |offset: &mut u64| -> Result<()> {
        match std::fs::File::open(&log) {
            Ok(mut f) => {
                f.seek(SeekFrom::Start(*offset))
                    .map_err(|e| Failure::action(format!("{}: {e}", log.display())))?;
                // Streamed: a log may be larger than memory.
                let n = std::io::copy(&mut f, &mut out)
                    .and_then(|n| out.flush().map(|()| n))
                    .map_err(|e| Failure::action(format!("{}: {e}", log.display())))?;
                *offset += n;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Failure::action(format!("{}: {e}", log.display()))),
        }
    };
    if !follow {
        return copy(&mut offset);
    }
    let _ = record;
    loop {
        // Read the status before the file: whatever the run wrote before it ended is then
        // printed by the copy that follows.
        // Ended: recorded as such, or (no daemon running to record it) its shim wrote the exit
        // record of the current claim.
        let done = match store.get_run(run) {
            Ok(r) if r.status.is_terminal() => true,
            Ok(r) if r.status.is_active() => {
                supervisor::shim::rundir::RunDir::new(state.root(), run)
                    .read_exit()
                    .ok()
                    .flatten()
                    .is_some_and(|e| e.token == r.claim_token)
            }
            _ => false,
        };
        copy(&mut offset)?;
        if done {
            return Ok(());
        }
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn cancel(path: &Path, run: i64) -> Result<()> {
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
        CancelOutcome::Cancelled => println!("run {run} cancelled"),
        CancelOutcome::Requested => {
            let sent = control::send(&state.socket_path(), Nudge::Eval);
            if sent.is_ok() {
                println!(
                    "run {run}: cancel requested; it ends `cancelled` once its process is gone"
                );
            } else {
                println!("run {run}: cancel requested; no daemon is running, it is stopped when one starts");
            }
            return Ok(());
        }
        CancelOutcome::AlreadyFinished(status) => {
            return Err(Failure::action(format!(
                "run {run} already ended: {status}"
            )));
        }
    }
    let _ = control::send(&state.socket_path(), Nudge::Eval);
    Ok(())
}

fn reload(path: &Path) -> Result<()> {
    let (state, _, errors) = load_for_reading(path)?;
    let socket = state.socket_path();
    // Sent even for an invalid file: the daemon then records the refusal for `fleet status`.
    control::send(&socket, Nudge::Reload)
        .map_err(|e| Failure::action(format!("no daemon answers on {}: {e}", socket.display())))?;
    if let Some(errors) = errors {
        // The daemon keeps its last good config and records the refusal.
        return Err(invalid(&errors));
    }
    println!("reload requested");
    Ok(())
}

fn check(path: &Path, json: bool) -> Result<()> {
    let state = state_of(path)?;
    let report = match open_existing_at(&state)? {
        Some(store) => {
            supervisor::check::check(&state, &store, store::now_ms()).map_err(Failure::action)?
        }
        None => {
            // Say so: a mistyped state_dir must not pass for a clean install.
            println!(
                "ok: nothing to check: no database at {}",
                state.db_path().display()
            );
            return Ok(());
        }
    };
    if json {
        println!("{}", output::check_json(&report));
    } else {
        print!("{}", output::check_text(&report));
    }
    if report.ok() {
        Ok(())
    } else {
        Err(Failure::action(format!(
            "check found {} violation{}",
            report.violations.len(),
            if report.violations.len() == 1 {
                ""
            } else {
                "s"
            }
        )))
    }
}
