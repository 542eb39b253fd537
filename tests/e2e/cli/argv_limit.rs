//! A command past the kernel's exec limits (an argument of 128 KiB or more; arguments and
//! environment past ARG_MAX) fails naming the command and the limit — not the fleet binary that
//! happened to call exec — whether its shim was exec'd or forked; `fleet validate` warns about
//! it beforehand.

use crate::common::*;

/// An argument past the kernel's per-argument limit (128 KiB).
const HUGE: usize = 200_000;

/// The start of `text`, enough to read in a failure message.
fn head(text: &str) -> String {
    text.chars().take(300).collect()
}

fn assert_names_command_and_limit(reason: &str, limit: &str, what: &str) {
    let shown = head(reason);
    assert!(
        reason.contains("`true`"),
        "{what}: name the command: {shown:?}"
    );
    assert!(
        reason.contains(limit),
        "{what}: name the limit {limit}: {shown:?}"
    );
    let fleet = fleet_bin().display().to_string();
    assert!(
        !reason.contains(&fleet),
        "{what}: the fleet binary is not at fault: {shown:?}"
    );
    assert!(
        reason.len() < 400,
        "{what}: the reason must not carry the oversized arguments ({} bytes)",
        reason.len()
    );
}

#[test]
fn an_argument_past_the_per_argument_limit_fails_naming_the_command_and_limit() {
    let big = "x".repeat(HUGE);
    let f = Fleet::new(&format!(
        "[projects.big]\ncommand = {}\n",
        toml_argv(&["true", &big])
    ));
    // With the fork server the request is too large for it and the shim is exec'd; without,
    // it always is. Either way the exec of `fleet shim` carries the argument and is refused.
    for fork_server in ["1", "0"] {
        let _d = f.start_daemon_env(&[("FLEET_FORK_SERVER", fork_server)]);
        let id = f.enqueue("big");
        let run = f.wait_terminal(id);
        assert_eq!(status_of(&run), "failed", "{}", head(&run.to_string()));
        let reason = run["reason"].as_str().unwrap_or_default();
        let what = format!("FLEET_FORK_SERVER={fork_server}");
        assert_names_command_and_limit(reason, "MAX_ARG_STRLEN", &what);
        assert!(reason.contains("argument 1"), "{what}: {}", head(reason));
        assert!(
            reason.contains(&HUGE.to_string()),
            "{what}: {}",
            head(reason)
        );
    }
}

/// The kernel's limit on one exec's arguments and environment together: a quarter of the stack
/// limit, at most 6 MiB, at least 128 KiB.
fn kernel_total_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max stack size"))
        .expect("a stack limit line");
    let soft = line.split_whitespace().nth(3).expect("the soft limit");
    let stack = soft.parse::<usize>().unwrap_or(usize::MAX);
    (stack / 4).clamp(128 << 10, 6 << 20)
}

/// What this process's environment takes in an exec: strings, NULs and pointers.
fn environment_bytes() -> usize {
    std::env::vars_os()
        .map(|(k, v)| k.len() + v.len() + 2 + std::mem::size_of::<usize>())
        .sum()
}

#[test]
fn a_forked_shim_refused_past_the_total_limit_names_the_command_and_arg_max() {
    // The daemon's environment fills the kernel's total limit but for a margin; the argument,
    // small enough for the fork server's request (the shim is forked, not exec'd), then takes
    // the command past it: only the shim's exec of the command is refused.
    let argument = "y".repeat(100_000);
    let margin = 48 << 10;
    let fill = kernel_total_limit() - environment_bytes() - margin;
    let chunk = 100_000;
    let pads: Vec<(String, String)> = (0..fill / chunk)
        .map(|i| (format!("PAD_{i}"), "p".repeat(chunk - 16)))
        .collect();
    let env: Vec<(&str, &str)> = pads.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let f = Fleet::new(&format!(
        "[projects.big]\ncommand = {}\n",
        toml_argv(&["true", &argument])
    ));
    let _d = f.start_daemon_env(&env);
    let id = f.enqueue("big");
    let run = f.wait_terminal(id);
    assert_eq!(status_of(&run), "failed", "{}", head(&run.to_string()));
    let reason = run["reason"].as_str().unwrap_or_default();
    assert_names_command_and_limit(reason, "ARG_MAX", "forked shim");
}

#[test]
fn validate_warns_about_a_command_past_the_kernel_limits() {
    let big = "x".repeat(HUGE);
    let f = Fleet::new(&format!(
        "[projects.fine]\ncommand = [\"true\"]\n\
         [projects.big]\ncommand = {}\n\
         [projects.bigenv]\ncommand = [\"true\"]\nenv = {{ HUGE = {} }}\n",
        toml_argv(&["true", &big]),
        toml_str(&big)
    ));
    let out = f.cmd(&["validate"]);
    assert_eq!(out.code(), Some(0), "a warning is not an error: {out:?}");
    assert!(out.stdout.contains("2 warnings"), "{out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one line per project at fault: {out:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("warning: ")
            && l.contains("projects.big.command")
            && l.contains("argument 1")
            && l.contains("MAX_ARG_STRLEN")),
        "{out:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("projects.bigenv.env.HUGE") && l.contains("MAX_ARG_STRLEN")),
        "{out:?}"
    );
    assert!(
        out.stderr.len() < 2000,
        "the warnings must not quote the argument"
    );

    f.write_config("[projects.fine]\ncommand = [\"true\"]\n");
    let out = f.cmd(&["validate"]);
    assert_eq!((out.code(), out.stderr.as_str()), (Some(0), ""), "{out:?}");
}
