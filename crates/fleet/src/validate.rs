//! `fleet validate`: every error in the config (exit 2), and warnings that do not make it
//! invalid but that its runs will meet (exit 0): a command the kernel will refuse to exec
//! because its arguments or environment are past the kernel's limits.

use std::ffi::OsString;
use std::path::Path;

use supervisor::config::{Config, ProjectConfig};
use supervisor::exec_limits::{self, TooLong};

use crate::cli::{Failure, Result};
use crate::console;

/// `fleet validate`.
pub fn validate(path: &Path) -> Result<()> {
    match Config::load(path) {
        Ok(config) => {
            let warnings = warnings(&config, exec_limits::arg_max());
            for w in &warnings {
                console::eprintln(format_args!("warning: {w}"));
            }
            let noted = match warnings.len() {
                0 => String::new(),
                1 => ", 1 warning".to_string(),
                n => format!(", {n} warnings"),
            };
            console::println(format_args!(
                "{}: ok ({} projects, {} namespaces{noted})",
                path.display(),
                config.projects.len(),
                config.namespaces.len()
            ))
        }
        Err(errors) => {
            for e in &errors.0 {
                console::eprintln(e);
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

/// One line per project whose command the kernel would refuse to start (`FILE: KEY: WHY`),
/// given the total exec limit `limit`. The environment is estimated: this process's, which the
/// daemon usually shares, plus the project's `env` and the variables fleet adds.
fn warnings(config: &Config, limit: Option<usize>) -> Vec<String> {
    let file = config.path.display();
    let mut out = Vec::new();
    for (name, project) in &config.projects {
        let env = exec_limits::environment_with(run_environment(project));
        let Some(why) = exec_limits::check(&project.command, &env, limit) else {
            continue;
        };
        let key = match &why {
            TooLong::Variable { name: var, .. } if project.env.contains_key(var) => {
                format!("projects.{name}.env.{var}")
            }
            TooLong::Variable { .. } => format!("projects.{name} (the environment fleet runs in)"),
            TooLong::Argument { .. } | TooLong::Total { .. } => {
                format!("projects.{name}.command")
            }
        };
        out.push(format!("{file}: {key}: {why}: its runs will fail to start"));
    }
    out
}

/// The changes a run of `project` makes to the daemon's environment: its `env`, then fleet's
/// own variables, with values as long as they may get.
fn run_environment(project: &ProjectConfig) -> Vec<(OsString, Option<OsString>)> {
    let mut env: Vec<(OsString, Option<OsString>)> = project
        .env
        .iter()
        .map(|(k, v)| (k.into(), Some(v.into())))
        .collect();
    let longest_id = i64::MAX.to_string();
    for (k, v) in [
        ("FLEET_RUN_ID", longest_id.as_str()),
        ("FLEET_PROJECT", project.name.as_str()),
        ("FLEET_NAMESPACE", project.namespace.as_str()),
        ("FLEET_ATTEMPT", longest_id.as_str()),
        ("FLEET_OCCURRENCE", "2000-01-01T00:00:00.000Z"),
    ] {
        env.push((k.into(), Some(v.into())));
    }
    env
}
