//! Argument parsing and the dispatch to one function per command.
//!
//! The commands themselves live beside this file: [`crate::commands`] (runs, status, cancel of
//! one run, reload, check), [`crate::operator`] (enqueue with its arguments and `--wait`, wait,
//! rerun, bulk cancel), [`crate::manual`] (completions, man pages), [`crate::logs`],
//! [`crate::validate`] and [`crate::serve`] (the daemon).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use crate::cmd;
use crate::console;
use crate::ctx::Ctx;
use crate::failure::{error_json, Failure, Result};
use crate::pause::KindFlag;

// Usage lines are written out (`override_usage`): clap's own show the options a user gave, or
// that came from the environment, without brackets (`fleet enqueue --config <CONFIG>
// <PROJECT>`), as if they were required.

/// A crash-safe supervisor for recurring and on-demand jobs on one host.
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

/// `fleet runs --limit N`: a whole number of 1 or more (0 would show nothing but a header, which
/// reads as "no runs").
fn limit_arg(n: &str) -> std::result::Result<u32, String> {
    match n.parse::<u32>() {
        Ok(0) => Err("must be 1 or more".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("must be a whole number from 1 to {}", u32::MAX)),
    }
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
    Runs {
        /// Only this project's runs.
        #[arg(long, value_name = "NAME")]
        project: Option<String>,
        /// Only runs in this status (queued, starting, running, succeeded, failed, timed_out,
        /// cancelled, lost); repeat it for several.
        #[arg(long)]
        status: Vec<String>,
        /// Only runs counted in this namespace.
        #[arg(long, value_name = "NAME")]
        namespace: Option<String>,
        /// Only runs of this trigger (manual, schedule, retry, rerun, on_failure).
        #[arg(long)]
        trigger: Option<String>,
        /// Only runs enqueued since WHEN: a duration ago ("2h", "30m") or an RFC 3339 time.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only runs enqueued until WHEN: a duration ago ("2h") or an RFC 3339 time.
        #[arg(long, value_name = "WHEN")]
        until: Option<String>,
        /// At most this many (1 or more).
        #[arg(long, default_value_t = 50, value_name = "N",
              value_parser = limit_arg)]
        limit: u32,
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
        /// Leave out the header line.
        #[arg(long)]
        no_headers: bool,
        /// The table even when stdout is not a terminal (instead of tab-separated lines).
        #[arg(long, conflicts_with = "json")]
        table: bool,
    },
    /// The daemon, the config in force and occupancy against every cap. Exits 0 when the daemon
    /// is evaluating, 1 when it is stuck, 3 when none runs.
    #[command(override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] status [--json]")]
    Status(cmd::status::StatusArgs),
    /// A run's combined stdout and stderr.
    #[command(
        override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] logs [--follow] <RUN>"
    )]
    Logs {
        /// The run id.
        run: i64,
        /// Keep printing as the run writes, until it ends.
        #[arg(long, short)]
        follow: bool,
    },
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
    Projects {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The hosts sharing the database: state (alive, silent, forgotten), epoch, heartbeat age,
    /// version, config version, active runs; or `forget NAME`.
    #[command(
        override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] hosts [--json]\n       fleet [--config <PATH>] [--state-dir <PATH>] hosts forget [--force] <NAME>"
    )]
    Hosts {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
        /// `forget NAME`: the host is gone.
        #[command(subcommand)]
        action: Option<HostsAction>,
    },
    /// Hold a project or a namespace: its queued runs wait, its occurrences are skipped.
    #[command(override_usage = "fleet [--config <PATH>] pause [--project | --namespace] <NAME>")]
    Pause {
        /// A project or namespace, as named in fleet.toml.
        name: String,
        /// NAME is a project (needed when a namespace has the same name).
        #[arg(long, conflicts_with = "namespace")]
        project: bool,
        /// NAME is a namespace (needed when a project has the same name).
        #[arg(long)]
        namespace: bool,
    },
    /// Release a paused project or namespace: its queued runs start again.
    #[command(override_usage = "fleet [--config <PATH>] resume [--project | --namespace] <NAME>")]
    Resume {
        /// A project or namespace, as named in fleet.toml (or paused before it was removed).
        name: String,
        /// NAME is a project (needed when a namespace has the same name).
        #[arg(long, conflicts_with = "namespace")]
        project: bool,
        /// NAME is a namespace (needed when a project has the same name).
        #[arg(long)]
        namespace: bool,
    },
    /// Restart-safety checker: exit 0 when every invariant holds, 1 listing each violation.
    #[command(override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] check [--json]")]
    Check(cmd::check::CheckArgs),
    /// Apply keep_runs and keep_for now: forget old ended runs and remove their files.
    #[command(override_usage = "fleet [--config <PATH>] [--state-dir <PATH>] prune [--dry-run]")]
    Prune {
        /// Only list the runs that would be pruned.
        #[arg(long)]
        dry_run: bool,
    },
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

/// What `fleet hosts` may do besides listing.
#[derive(Debug, Subcommand)]
pub enum HostsAction {
    /// State that host NAME is gone: its epoch is bumped (its daemon can write nothing more),
    /// its active runs end `lost` (retried per policy) and their seats are freed, in one
    /// transaction. Refused while its heartbeat is younger than 10 s, unless --force.
    Forget {
        /// The host, as `fleet hosts` names it.
        name: String,
        /// Forget it even though its heartbeat is recent (it is alive).
        #[arg(long)]
        force: bool,
    },
}

impl Command {
    /// Whether the command was asked for JSON: its errors are then JSON too.
    fn json(&self) -> bool {
        match self {
            Command::Runs { json, .. }
            | Command::Projects { json }
            | Command::Hosts { json, .. } => *json,
            Command::Check(args) => args.json,
            Command::Status(args) => args.json,
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
                | Command::Pause { .. }
                | Command::Resume { .. }
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
        Command::Runs {
            project,
            status,
            namespace,
            trigger,
            since,
            until,
            limit,
            json,
            no_headers,
            table,
        } => crate::runs_cmd::runs(
            &ctx,
            crate::runs_cmd::RunsArgs {
                project,
                status,
                namespace,
                trigger,
                since,
                until,
                limit,
                json,
                no_headers,
                table,
            },
        ),
        Command::Status(args) => cmd::status::status(&ctx, &args),
        Command::Logs { run, follow } => crate::logs::logs(&ctx, run, follow),
        Command::Cancel(args) => cmd::cancel::cancel(&ctx, args),
        Command::Reload => cmd::reload::reload(&ctx),
        Command::Check(args) => cmd::check::check(&ctx, &args),
        Command::Prune { dry_run } => crate::prune::prune(&ctx, dry_run),
        Command::Wait(args) => cmd::wait::wait(&ctx, &args),
        Command::Rerun(args) => cmd::rerun::rerun(&ctx, &args),
        Command::Completions(args) => cmd::manual::completions(&args, Cli::command()),
        Command::Man(args) => cmd::manual::man(&args, Cli::command()),
        Command::Projects { json } => crate::projects::projects(&ctx, json),
        Command::Hosts { json, action } => match action {
            None => crate::hosts_cmd::hosts(&ctx, json),
            Some(HostsAction::Forget { name, force }) => {
                crate::hosts_cmd::forget(&ctx, &name, force)
            }
        },
        Command::Pause {
            name,
            project,
            namespace,
        } => crate::pause::pause(&ctx, &name, KindFlag { project, namespace }),
        Command::Resume {
            name,
            project,
            namespace,
        } => crate::pause::resume(&ctx, &name, KindFlag { project, namespace }),
    }
}
