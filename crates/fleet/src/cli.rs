//! The command line: the clap definitions (each command's arguments are its own, in
//! [`crate::cmd`]; the help and usage line of each command are here, on its variant), the
//! parse, and the dispatch of each command to its function with a [`Ctx`] made from
//! `--config` and `--state-dir`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use crate::cmd;
use crate::console;
use crate::ctx::Ctx;
use crate::failure::{error_json, Failure, Result};

// Usage lines are written out (`override_usage`): clap's own show the options a user gave, or
// that came from the environment, without brackets (`fleet enqueue --config <CONFIG>
// <PROJECT>`), as if they were required.

/// A crash-safe supervisor for recurring and on-demand jobs, on one host or many.
// (Not "fleet: …": the man page's NAME line already reads "fleet \- <this>".)
#[derive(Parser, Debug)]
#[command(
    name = "fleet",
    version,
    override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] <COMMAND>"
)]
struct Cli {
    /// The config file (default: $FLEET_CONFIG, else ./fleet.toml).
    #[arg(
        long,
        global = true,
        env = "FLEET_CONFIG",
        default_value = "fleet.toml",
        // The help says the whole rule ($FLEET_CONFIG first); clap's "[default: fleet.toml]"
        // would read as if the variable did not count.
        hide_default_value = true,
        value_name = "PATH"
    )]
    config: PathBuf,
    /// Read this state directory instead of the one the config names (runs, status, logs,
    /// cancel, wait, reload, check): they then work even while fleet.toml is broken or missing.
    #[arg(long, global = true, value_name = "PATH")]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the supervisor in the foreground until SIGTERM or SIGINT.
    #[command(
        override_usage = "fleet [--config <PATH>] daemon [--log-format <FORMAT>] [--host <NAME>]"
    )]
    Daemon(cmd::daemon::DaemonArgs),
    /// Check the config; print every error, and warnings.
    #[command(override_usage = "fleet [--config <PATH>] validate")]
    Validate,
    /// Queue a run of PROJECT; prints its run id (with --wait, then its end).
    #[command(
        override_usage = "fleet [--config <PATH>] enqueue [--priority <N>] [--env <NAME=VALUE>]... [--wait [--timeout <DURATION>]] <PROJECT> [-- <ARG>...]"
    )]
    Enqueue(cmd::enqueue::EnqueueArgs),
    /// List runs, newest first.
    #[command(
        override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] runs [--project <NAME>] [--namespace <NAME>] [--status <STATUS>]... [--trigger <TRIGGER>] [--since <WHEN>] [--until <WHEN>] [--limit <N>] [--json] [--no-headers] [--table]"
    )]
    Runs(cmd::runs::RunsArgs),
    /// The daemon, the config in force and occupancy against every cap. Exits 0 when the daemon
    /// is evaluating, 1 when it is stuck, 3 when none runs.
    #[command(override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] status [--json]")]
    Status(cmd::status::StatusArgs),
    /// A run's combined stdout and stderr.
    #[command(
        override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] logs [--follow] <RUN>"
    )]
    Logs(cmd::logs::LogsArgs),
    /// Stop queued or active runs: by id, or every run of a project, a namespace, or all (give
    /// exactly one of them).
    #[command(
        override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] cancel [--project <NAME> | --namespace <NAME> | --all] [--queued] [<RUN>...]"
    )]
    Cancel(cmd::cancel::CancelArgs),
    /// Ask the daemon to re-read fleet.toml now.
    #[command(override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] reload")]
    Reload,
    /// Each project: schedule, next occurrence, last run, active and queued runs, paused.
    #[command(override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] projects [--json]")]
    Projects(cmd::projects::ProjectsArgs),
    /// The hosts sharing the database: state (alive, silent, forgotten), epoch, heartbeat age,
    /// version, config version, active runs; or `forget NAME`.
    #[command(
        override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] hosts [--json]\n       fleet [--config <PATH>] [--state-dir <PATH>] hosts forget [--force] <NAME>"
    )]
    Hosts(cmd::hosts::HostsArgs),
    /// Hold a project or a namespace: its queued runs wait, its occurrences are skipped.
    #[command(override_usage = "fleet [--config <PATH>] pause [--project | --namespace] <NAME>")]
    Pause(cmd::pause::PauseArgs),
    /// Release a paused project or namespace: its queued runs start again.
    #[command(override_usage = "fleet [--config <PATH>] resume [--project | --namespace] <NAME>")]
    Resume(cmd::pause::ResumeArgs),
    /// Restart-safety checker: exit 0 when every invariant holds, 1 listing each violation.
    #[command(override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] check [--json]")]
    Check(cmd::check::CheckArgs),
    /// Apply keep_runs and keep_for now: forget old ended runs and remove their files.
    #[command(override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] prune [--dry-run]")]
    Prune(cmd::prune::PruneArgs),
    /// Block until runs, with their retries, have ended; exit as their commands did.
    #[command(
        override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] wait [--timeout <DURATION>] <RUN>..."
    )]
    Wait(cmd::wait::WaitArgs),
    /// Queue a new run of a run's project with the same arguments; prints its id.
    #[command(override_usage = "fleet [--config <PATH>] rerun <RUN>")]
    Rerun(cmd::rerun::RerunArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    #[command(override_usage = "fleet [--config <PATH>] completions <SHELL>")]
    Completions(cmd::manual::CompletionsArgs),
    /// Print the man page (roff): fleet(1), or fleet-COMMAND(1) for one command.
    #[command(override_usage = "fleet [--config <PATH>] man [<COMMAND>]")]
    Man(cmd::manual::ManArgs),
}

impl Command {
    /// Whether the command was asked for JSON: its errors are then JSON too.
    fn json(&self) -> bool {
        match self {
            Command::Runs(args) => args.json,
            Command::Status(args) => args.json,
            Command::Check(args) => args.json,
            Command::Projects(args) => args.json,
            Command::Hosts(args) => args.json,
            _ => false,
        }
    }
}

/// Parses the command line and runs the command. With `--json`, a failure not already reported
/// in the command's output is printed on stdout as `{"error": MESSAGE}` (and on stderr as
/// always, by the caller).
pub fn main() -> Result<()> {
    let Some(cli) = parse()? else {
        return Ok(());
    };
    let json = cli.command.json();
    let result = run(cli);
    if let Err(e) = &result {
        if json && !e.reported && !e.is_reader_gone() {
            // The exit status is the failure's, whether or not anyone reads this.
            let _ = console::println(error_json(&e.message));
        }
    }
    result
}

/// The parsed command line, or `None` once help or the version was printed. A usage error is
/// printed on stderr (and as a JSON error on stdout if `--json` was among the arguments), and
/// the process exits 2 at once.
fn parse() -> Result<Option<Cli>> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let e = match Cli::try_parse_from(&args) {
        Ok(cli) => return Ok(Some(cli)),
        Err(e) => e,
    };
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        return match e.print() {
            Err(err) => Err(console::stdout_failure(err)),
            Ok(()) => Ok(None),
        };
    }
    let wants_json = args
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json");
    if wants_json {
        let _ = console::println(error_json(&usage_error_line(&e)));
    }
    // Best effort, as every write to stderr: clap reports its own write failures only.
    let _ = e.print();
    std::process::exit(2);
}

/// clap's message for a usage error on one line, without its `error: ` prefix, usage and
/// hints: what the JSON error object says.
fn usage_error_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut parts = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("Usage:") || line.starts_with("For more") {
            if !parts.is_empty() {
                break;
            }
            continue;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line).to_string());
    }
    parts.join(" ")
}

fn run(cli: Cli) -> Result<()> {
    if cli.state_dir.is_some()
        && matches!(
            cli.command,
            Command::Daemon(_)
                | Command::Enqueue(_)
                | Command::Validate
                | Command::Rerun(_)
                | Command::Pause(_)
                | Command::Resume(_)
        )
    {
        // These act on the config itself; a second source for the state directory could only
        // disagree with it.
        return Err(Failure::input(
            "--state-dir is for runs, status, logs, cancel, wait, check, projects, hosts and reload; daemon, enqueue, rerun, validate, pause and resume use the config's state_dir",
        ));
    }
    let ctx = Ctx::new(cli.config, cli.state_dir);
    match cli.command {
        Command::Daemon(args) => cmd::daemon::daemon(ctx, args),
        Command::Validate => cmd::validate::validate(&ctx),
        Command::Enqueue(args) => cmd::enqueue::enqueue(&ctx, &args),
        Command::Runs(args) => cmd::runs::runs(&ctx, args),
        Command::Status(args) => cmd::status::status(&ctx, &args),
        Command::Logs(args) => cmd::logs::logs(&ctx, &args),
        Command::Cancel(args) => cmd::cancel::cancel(&ctx, args),
        Command::Reload => cmd::reload::reload(&ctx),
        Command::Check(args) => cmd::check::check(&ctx, &args),
        Command::Prune(args) => cmd::prune::prune(&ctx, &args),
        Command::Wait(args) => cmd::wait::wait(&ctx, &args),
        Command::Rerun(args) => cmd::rerun::rerun(&ctx, &args),
        Command::Completions(args) => cmd::manual::completions(&args, Cli::command()),
        Command::Man(args) => cmd::manual::man(&args, Cli::command()),
        Command::Projects(args) => cmd::projects::projects(&ctx, &args),
        Command::Hosts(args) => cmd::hosts::hosts(&ctx, &args),
        Command::Pause(args) => cmd::pause::pause(&ctx, &args),
        Command::Resume(args) => cmd::pause::resume(&ctx, &args),
    }
}
