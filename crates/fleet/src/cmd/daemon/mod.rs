//! `fleet daemon`: starts the fork server, the log ([`logging`]) and the runtime, then runs the
//! supervisor (`supervisor::daemon::run`) until SIGTERM or SIGINT.
//!
//! Order matters: the fork server (its program, `fleet-forksrv`, found beside the running
//! `fleet`) is forked first, while the process still has one thread and before the config is
//! read, the daemon lock taken or the runtime started; only then come the config, the log and
//! the tokio runtime. `FLEET_FORK_SERVER=0` execs every shim instead (slower; for comparison and
//! diagnosis).

mod logging;

use config::LogFormat;
use std::time::Duration;
use supervisor::shim::forkserver;
use supervisor::statedir::StateDirError;

use crate::ctx::Ctx;
use crate::failure::{Failure, Result};

/// What `fleet daemon` was asked.
#[derive(clap::Args, Debug)]
pub struct DaemonArgs {
    /// How log lines are written: text, or json (one object per line). Overrides
    /// `log_format` in fleet.toml.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormatArg>,
    /// This daemon's host name (1-64 of letters, digits, '.', '_', '-'). Overrides `host`
    /// in fleet.toml (default: the machine's hostname).
    #[arg(long, value_name = "NAME", value_parser = host_name_arg)]
    pub host: Option<String>,
}

/// `fleet daemon --log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormatArg {
    /// One line of text per event (the default).
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormatArg {
    /// As the config's type.
    fn format(self) -> LogFormat {
        match self {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        }
    }
}

/// `--host NAME`: a valid host name, or clap's usage error naming the flag.
fn host_name_arg(name: &str) -> std::result::Result<String, String> {
    match config::host_name_problem(name) {
        None => Ok(name.to_string()),
        Some(why) => Err(why),
    }
}

/// `fleet daemon`. `--log-format` overrides the config's `log_format`, `--host` the config's
/// `host` (already checked to be a valid name). `ctx` is taken whole: the daemon keeps the
/// config for its whole life.
pub fn daemon(ctx: Ctx, args: DaemonArgs) -> Result<()> {
    let DaemonArgs { log_format, host } = args;
    let log_format = log_format.map(LogFormatArg::format);
    if let Some(name) = &host {
        // Before the load: with the flag, the machine's own hostname (the default of `host`)
        // is never read, so an unusable one cannot fail the load.
        config::name_this_host(name);
    }
    // Now, while this process has one thread: the fork server must be forked before the
    // runtime (or anything else) starts threads, and before the daemon lock is taken. And
    // before the config is read: the server is a copy of this process as it stands, and every
    // shim a copy of the server, so each fork copies (and each shim's exit tears down) the page
    // tables of what it holds (a parsed config of a thousand projects took the server from 1.5 to
    // 5.7 MiB of its own memory).
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
    // This binary: the shim's program when a shim is exec'd, and where the fork server's
    // program is looked for.
    let fleet_exe = std::env::current_exe();
    let fork_server = if use_fork_server {
        // The fork server's own program, beside this binary; when it is missing or unusable
        // the server forks from this image instead (logged below, once logging exists).
        let program = fleet_exe
            .as_ref()
            .ok()
            .map(|exe| forkserver::program_beside(exe));
        forkserver::ForkServer::start(program.as_deref()).map_err(|e| e.to_string())
    } else {
        Err("FLEET_FORK_SERVER=0".to_string())
    };
    // A config that cannot be loaded ends the daemon here, and its fork server with it (the
    // socket closes).
    let config_path = ctx.path().to_path_buf();
    let config = ctx.into_config()?;
    // The flag wins over the file. Chosen at start: a reload does not change it.
    let log_format = log_format.unwrap_or(config.log_format);
    logging::init(log_format);
    let shim_program = fleet_exe
        .map_err(|e| Failure::action(format!("cannot find the fleet binary for the shim: {e}")))?;
    let fork_server = match fork_server {
        Ok(server) => {
            match server.image() {
                forkserver::Image::Program(path) => tracing::debug!(
                    pid = server.pid(),
                    program = %path.display(),
                    "fork server started"
                ),
                forkserver::Image::Own { why } => tracing::warn!(
                    pid = server.pid(),
                    "the fork server forks shims from fleet's own image, which is slower: {why}"
                ),
            }
            Some(std::sync::Arc::new(server))
        }
        Err(why) => {
            tracing::warn!("no fork server ({why}): every shim is exec'd");
            None
        }
    };
    let options = supervisor::daemon::DaemonOptions {
        config_path,
        shim_program,
        fork_server,
        shim_log: supervisor::shim::log::ShimLog::for_daemon(log_format),
        host,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::action(format!("cannot start the runtime: {e}")))?;
    let result = runtime.block_on(supervisor::daemon::run(config, options));
    // Shim watchers and adopted-run waiters must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    // A state directory or database that cannot be used at the start is judged as for every
    // command (so a database written by a newer fleet, or a state directory other users may
    // write into, is exit 2 here too); another daemon
    // holding the directory, or the directory replaced under a running daemon, is exit 1.
    result.map_err(|e| match e {
        supervisor::daemon::DaemonError::StateDir(
            inner @ (StateDirError::Unusable { .. }
            | StateDirError::Inaccessible { .. }
            | StateDirError::Exposed(_)
            | StateDirError::Store(_)),
        ) => Failure::state_dir(inner),
        other => Failure::action(other),
    })
}
