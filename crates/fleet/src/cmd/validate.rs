//! `fleet validate`: every error in the config (exit 2), and warnings that do not make it
//! invalid but that its runs will meet (exit 0): a command the kernel will refuse to exec
//! because its arguments or environment are past the kernel's limits; a host projects are
//! placed on that no `[hosts.NAME]` table declares (maybe a typo); a project placed only on
//! other hosts while the database is SQLite, which no other host shares (it would never run); a
//! command whose program is a file the kernel cannot execute by itself (a script without its
//! `#!` line, which fleet hands to no shell).

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use config::{Config, ProjectConfig};
use supervisor::exec_limits::{self, TooLong};

use crate::console;
use crate::ctx::Ctx;
use crate::failure::{Failure, Result};

/// `fleet validate`.
pub fn validate(ctx: &Ctx) -> Result<()> {
    let path = ctx.path();
    match ctx.loaded() {
        Ok(config) => {
            let mut warnings = warnings(config, exec_limits::arg_max());
            warnings.extend(host_warnings(config));
            warnings.extend(script_warnings(config));
            for w in &warnings {
                console::eprintln(format_args!("warning: {w}"));
            }
            let noted = match warnings.len() {
                0 => String::new(),
                1 => ", 1 warning".to_string(),
                n => format!(", {n} warnings"),
            };
            let count = |n: usize, one: &str| match n {
                1 => format!("1 {one}"),
                n => format!("{n} {one}s"),
            };
            console::println(format_args!(
                "{}: ok ({}, {}{noted})",
                path.display(),
                count(config.projects.len(), "project"),
                count(config.namespaces.len(), "namespace")
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

/// One line per project whose program, as its runs would find it (a path holding `/` against
/// its `cwd`, else the first executable file on its `PATH` — the project's `env`, else this
/// process's), is a file that starts neither with `#!` nor as an ELF binary: the kernel refuses
/// to execute it (`Exec format error`), and fleet runs no shell in its place. And one per
/// project whose program is not found there at all: its runs would fail to start, unless it is
/// installed before they do (or the daemon's `PATH` differs from this process's), so it is a
/// warning, not an error.
fn script_warnings(config: &Config) -> Vec<String> {
    let file = config.path.display();
    let mut out = Vec::new();
    for (name, project) in &config.projects {
        let Some(wanted) = project.command.first() else {
            continue;
        };
        let Some(program) = found(project, wanted) else {
            let place = if wanted.contains('/') {
                format!("at {}", project.cwd.join(wanted).display())
            } else if project.env.contains_key("PATH") {
                "on the PATH of its env".to_string()
            } else {
                "on this PATH".to_string()
            };
            out.push(format!(
                "{file}: projects.{name}.command: no executable file {wanted:?} {place}: its runs \
                 will fail to start unless it is installed before they do"
            ));
            continue;
        };
        let mut head = [0u8; 4];
        // A file this process may not read is left alone: its runs may still read it.
        let Ok(n) = std::fs::File::open(&program).and_then(|mut f| f.read(&mut head)) else {
            continue;
        };
        if head[..n].starts_with(b"#!") || head[..n] == *b"\x7fELF" {
            continue;
        }
        out.push(format!(
            "{file}: projects.{name}.command: {} has no `#!` line and is not a binary: its runs \
             will fail to start (Exec format error); fleet runs no shell for it: add a `#!` line, \
             or write [\"sh\", {:?}]",
            program.display(),
            program.display().to_string()
        ));
    }
    out
}

/// Where a run of `project` finds `program`, as `execvp` looks (see [`script_warnings`]):
/// `None` when no executable regular file is there.
fn found(project: &ProjectConfig, program: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        // Without its `.` components, for the message.
        let path: PathBuf = project.cwd.join(program).components().collect();
        return executable(&path).then_some(path);
    }
    let path = match project.env.get("PATH") {
        Some(p) => OsString::from(p),
        None => std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into()),
    };
    std::env::split_paths(&path)
        .map(|dir| project.cwd.join(dir).join(program))
        .find(|p| executable(p))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn executable(path: &Path, text: &[u8]) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A script without `#!`, by path or on the project's `PATH`, is named, and so is a
    /// program not found; one with `#!` and a binary are not.
    #[test]
    fn a_script_without_its_interpreter_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        executable(&dir.path().join("bare.sh"), b"echo hi\n");
        executable(&bin.join("bare-on-path"), b"echo hi\n");
        executable(&dir.path().join("good.sh"), b"#!/bin/sh\necho hi\n");
        let text = format!(
            "[projects.a]\ncommand = [\"./bare.sh\"]\n\
             [projects.b]\ncommand = [\"bare-on-path\"]\nenv = {{ PATH = {:?} }}\n\
             [projects.c]\ncommand = [\"./good.sh\"]\n\
             [projects.d]\ncommand = [\"true\"]\n\
             [projects.e]\ncommand = [\"./not-there\"]\n",
            bin.display().to_string()
        );
        let path = dir.path().join("fleet.toml");
        std::fs::write(&path, &text).unwrap();
        let config = Config::load(&path).unwrap();
        let w = script_warnings(&config);
        assert_eq!(w.len(), 3, "{w:#?}");
        assert!(
            w[0].contains("projects.a.command") && w[0].contains("bare.sh"),
            "{w:#?}"
        );
        assert!(
            w[1].contains("projects.b.command") && w[1].contains("bare-on-path"),
            "{w:#?}"
        );
        assert!(
            w[2].contains("projects.e.command")
                && w[2].contains("no executable file \"./not-there\"")
                && w[2].contains("will fail to start"),
            "{w:#?}"
        );
    }
}
