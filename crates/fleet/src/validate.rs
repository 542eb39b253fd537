//! `fleet validate`: every error in the config (exit 2), and warnings that do not make it
//! invalid but that its runs will meet (exit 0): a command the kernel will refuse to exec
//! because its arguments or environment are past the kernel's limits; a host projects are
//! placed on that no `[hosts.NAME]` table declares (maybe a typo); a project placed only on
//! other hosts while the database is SQLite, which no other host shares (it would never run).

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
            let mut warnings = warnings(&config, exec_limits::arg_max());
            warnings.extend(host_warnings(&config));
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

/// One line per host name projects are placed on that no `[hosts.NAME]` declares (once per
/// name, at the first project naming it), and, on SQLite, one per project placed only on other
/// hosts than this one ([`Config::host`]): no other host shares that database, so its runs
/// would wait for ever.
fn host_warnings(config: &Config) -> Vec<String> {
    let file = config.path.display();
    let mut out = Vec::new();
    for host in config.undeclared_hosts() {
        let placed: Vec<&str> = config
            .projects
            .values()
            .filter(|p| p.hosts.as_ref().is_some_and(|h| h.contains(host)))
            .map(|p| p.name.as_str())
            .collect();
        out.push(format!(
            "{file}: projects.{}.hosts: host {host:?} is declared by no [hosts.{host}] table \
             (placed there: {}): it has no capacity of its own; check the name",
            placed[0],
            placed.join(", ")
        ));
    }
    if config.database.is_none() {
        for p in config.projects.values() {
            if let Some(hosts) = p.hosts.as_ref().filter(|_| !p.placed_on(&config.host)) {
                let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
                out.push(format!(
                    "{file}: projects.{}.hosts: placed only on {}, not on this host ({}), and \
                     the database is SQLite, which no other host shares: its runs will never start",
                    p.name,
                    names.join(", "),
                    config.host
                ));
            }
        }
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
