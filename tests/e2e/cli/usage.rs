//! Usage lines show optional options as optional: `fleet [--config <PATH>] enqueue <PROJECT>`,
//! never `fleet enqueue --config <CONFIG> <PROJECT>`, whether `--config` was given (before or
//! after the command) or came from `FLEET_CONFIG` — for every command `fleet --help` lists.

use std::process::Command;

use super::json::subcommands;
use crate::common::*;

/// The `Usage:` line of `out` (stdout for help, stderr for an error).
fn usage_line(text: &str) -> Option<&str> {
    text.lines().find(|l| l.trim_start().starts_with("Usage:"))
}

/// `line` without its bracketed (optional) groups.
fn outside_brackets(line: &str) -> String {
    let mut depth = 0usize;
    line.chars()
        .filter(|&c| {
            match c {
                '[' => depth += 1,
                ']' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect()
}

fn assert_optional_options(text: &str, what: &str) {
    let line = usage_line(text).unwrap_or_else(|| panic!("{what}: no usage line in {text:?}"));
    assert!(
        line.contains("[--config <PATH>]"),
        "{what}: --config should show as optional: {line:?}"
    );
    let bare = outside_brackets(line);
    assert!(
        !bare.contains("--"),
        "{what}: an option shows outside brackets, as if required: {line:?}"
    );
}

#[test]
fn every_usage_line_shows_config_as_optional() {
    let f = Fleet::new("[projects.hello]\ncommand = [\"echo\", \"hi\"]\n");
    let config = f.config.to_str().unwrap().to_string();
    let commands = subcommands(&f.cmd_ok(&["--help"]));
    assert!(commands.len() >= 9, "{commands:?}");
    let from_env = |args: &[&str]| {
        let mut c = Command::new(fleet_bin());
        c.args(args)
            .env("FLEET_CONFIG", &config)
            .env(MARKER_VAR, &f.marker)
            .current_dir(f.path());
        run_with_deadline(c, CMD_DEADLINE)
    };
    for cmd in &commands {
        let cmd = cmd.as_str();
        let out = f.cmd(&[cmd, "--no-such-flag"]);
        assert_eq!(out.code(), Some(2), "{out:?}");
        assert_optional_options(&out.stderr, &format!("--config X {cmd} --no-such-flag"));
        let out = f.cmd(&[cmd, "--config", &config, "--no-such-flag"]);
        assert_optional_options(&out.stderr, &format!("{cmd} --config X --no-such-flag"));
        let out = from_env(&[cmd, "--no-such-flag"]);
        assert_optional_options(&out.stderr, &format!("FLEET_CONFIG=X {cmd} --no-such-flag"));
        let out = f.cmd(&[cmd, "--help"]);
        assert_eq!(out.code(), Some(0), "{out:?}");
        assert_optional_options(&out.stdout, &format!("{cmd} --help"));
    }
    // A missing argument, as first reported.
    for args in [&["enqueue"][..], &["logs"], &["cancel"]] {
        let out = f.cmd(args);
        assert_eq!(out.code(), Some(2), "{out:?}");
        assert_optional_options(&out.stderr, &format!("{args:?}"));
        let out = from_env(args);
        assert_optional_options(&out.stderr, &format!("FLEET_CONFIG=X {args:?}"));
    }
    let out = from_env(&["no-such-command"]);
    assert_optional_options(&out.stderr, "FLEET_CONFIG=X no-such-command");
    assert_optional_options(&f.cmd_ok(&["--help"]), "--help");
}
