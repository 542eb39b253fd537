//! `fleet enqueue PROJECT [--priority N] [--env NAME=VALUE]... [--wait] [-- ARG...]`: queues a
//! run of a project and prints its id; with `--wait`, then waits for it as `fleet wait` does.
//!
//! A run's own arguments and variables reach its command as argv items and environment
//! entries, never through a shell, so no quoting can change what runs. The checks here refuse,
//! with exit 2, what could only fail later in the daemon or silently do something else: a
//! project that did not opt in with `accept_args = true`, a variable name the environment
//! cannot hold, a name fleet sets itself.

use std::time::Duration;

use config::ProjectConfig;
use store::{NewRun, Trigger};

use crate::ctx::{self, Ctx, InForce};
use crate::failure::{Failure, Result};
use crate::{queue, run_end};

/// What `fleet enqueue` was asked.
#[derive(clap::Args, Debug)]
pub struct EnqueueArgs {
    /// The project, as named in fleet.toml.
    pub project: String,
    /// Higher runs first; equal priorities run in enqueue order.
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    pub priority: i64,
    /// A variable for this run alone, on top of the project's env (repeatable; needs
    /// accept_args = true).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Block until the run, with its retries, has ended; exit as its command did.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this long (exit 124), leaving the run as it is.
    #[arg(long, requires = "wait", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Arguments appended to the project's command for this run (needs accept_args = true).
    #[arg(last = true, value_name = "ARG")]
    pub args: Vec<String>,
}

/// `fleet enqueue`: queues a run and prints its id; with `--wait`, then waits for it as
/// [`run_end::wait`] does.
///
/// Errors: unknown project, arguments or `--env` for a project without `accept_args`, a bad
/// `--env` (exit 2); the database (exit 1); the wait's own.
pub fn enqueue(ctx: &Ctx, req: &EnqueueArgs) -> Result<()> {
    // On a shared database, the projects every daemon knows, not only this file's.
    let InForce {
        config,
        source,
        store,
    } = ctx.in_force()?;
    let Some(p) = config.projects.get(&req.project) else {
        return Err(Failure::input(format!(
            "unknown project {:?} (not in {source})",
            req.project,
        )));
    };
    let env = req
        .env
        .iter()
        .map(|item| parse_env(item))
        .collect::<Result<Vec<_>>>()?;
    let env = dedup_env(env);
    check_for(p, &source, &req.args, &env)?;
    let store = ctx::store_to_write(store, &config)?;
    let id = queue::add(
        &store,
        &config,
        &NewRun {
            project: req.project.clone(),
            namespace: p.namespace.clone(),
            priority: req.priority,
            trigger: Trigger::Manual,
            args: req.args.clone(),
            env,
            ..Default::default()
        },
    )?;
    if req.wait {
        run_end::wait(&store, &[id], req.timeout)
    } else {
        Ok(())
    }
}

/// Parses one `--env NAME=VALUE` (split at the first `=`).
///
/// Errors: no `=`, or a name [`check_name`] refuses (exit 2, naming the option).
fn parse_env(item: &str) -> Result<(String, String)> {
    let Some((name, value)) = item.split_once('=') else {
        return Err(Failure::input(format!(
            "--env {item:?}: expected NAME=VALUE"
        )));
    };
    // The whole argument as given: `--env =x` must not read as `--env ""`.
    check_name(name).map_err(|why| Failure::input(format!("--env {item:?}: {why}")))?;
    Ok((name.to_string(), value.to_string()))
}

/// Whether `name` may be set for one run: non-empty, without `=` or NUL, and not one fleet sets
/// (`FLEET_*`) or strips (`FAILPOINTS`) for every run — the same rule as a project's `env`.
///
/// Errors: why not, in words.
fn check_name(name: &str) -> std::result::Result<(), &'static str> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err("invalid environment variable name (empty, or contains '=' or NUL)");
    }
    if name.starts_with("FLEET_") || name == "FAILPOINTS" {
        return Err("reserved: fleet sets FLEET_* (and strips FAILPOINTS) for every run");
    }
    Ok(())
}

/// Refuses `args` and `env` for `project` (of the config `source` names, for the message) when
/// it did not set `accept_args = true`. Nothing given is always accepted. (Their size needs no check here: each reached this process through
/// an exec, under the same kernel limits; a total past the limit with the daemon's environment
/// fails the run at start, with a message naming the limit.)
///
/// Errors: exit 2 with a one-line message naming the project.
fn check_for(
    project: &ProjectConfig,
    source: &str,
    args: &[String],
    env: &[(String, String)],
) -> Result<()> {
    if args.is_empty() && env.is_empty() {
        return Ok(());
    }
    if !project.accept_args {
        return Err(Failure::input(format!(
            "project {:?} does not accept arguments or --env (set accept_args = true in its [projects.{}] table, in {source})",
            project.name, project.name
        )));
    }
    Ok(())
}

/// `env` with every name given once, at the place of its last value (a later `--env` for the
/// same name wins, as it would in an environment).
fn dedup_env(env: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(env.len());
    for (k, v) in env {
        out.retain(|(name, _)| *name != k);
        out.push((k, v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_items_parse_and_names_are_checked() {
        assert_eq!(
            parse_env("A=b=c").unwrap(),
            ("A".to_string(), "b=c".to_string())
        );
        assert_eq!(parse_env("A=").unwrap(), ("A".to_string(), String::new()));
        for bad in ["A", "=x", "FLEET_RUN_ID=1", "FAILPOINTS=x"] {
            assert_eq!(parse_env(bad).unwrap_err().code, 2, "{bad}");
        }
    }

    #[test]
    fn a_later_value_wins() {
        let env = vec![
            ("A".into(), "1".into()),
            ("B".into(), "2".into()),
            ("A".into(), "3".into()),
        ];
        assert_eq!(
            dedup_env(env),
            vec![("B".into(), "2".into()), ("A".into(), "3".into())]
        );
    }
}
