//! A run's own arguments and environment: appended to the project's argv and environment as
//! they are (no shell reads them), recorded with the run, kept by retries; refused for a project
//! that did not set `accept_args = true`.

use crate::common::*;

/// A project that prints each argument on its own line between brackets, then `$V`, and
/// fails on its first attempt (so that its retry shows what a retry gets).
fn echo_args(dir: &std::path::Path) -> String {
    format!(
        "[projects.echo]\naccept_args = true\nretries = 1\nretry_backoff = \"0s\"\n\
         command = [\"sh\", \"-c\", {script}, \"sh\", \"fixed\"]\n\
         [projects.closed]\ncommand = [\"true\"]\n",
        script = toml_str(&format!(
            "for a in \"$@\"; do echo \"[$a]\"; done; echo \"V=[$V] P=[$P]\"; \
             if [ -e {m} ]; then exit 0; fi; touch {m}; exit 9",
            m = shell_quote(&dir.join("first-done"))
        ))
    )
}

#[test]
fn arguments_and_env_reach_the_command_unread_by_a_shell_and_retries_keep_them() {
    arguments_reach_the_command(&[]);
}

/// The same through an exec'd shim, which gets the command on its own command line and the
/// variables as its environment (the fork server gets both in one message).
#[test]
fn arguments_and_env_reach_the_command_through_an_execd_shim() {
    arguments_reach_the_command(&[("FLEET_FORK_SERVER", "0")]);
}

fn arguments_reach_the_command(daemon_env: &[(&str, &str)]) {
    let f = Fleet::with(echo_args);
    let _d = f.start_daemon_env(daemon_env);
    let pwned = f.file("pwned");
    let evil = format!("$(touch {})", pwned.display());
    let out = f.cmd(&[
        "enqueue", "--wait", "--env", "V=x y", "--env", "P=1", "--env", "P=2", "echo", "--", "a b",
        &evil, ";", "--flag",
    ]);
    assert_eq!(out.code(), Some(0), "{out:?}\n{}", f.diagnostics());
    let id: i64 = out.stdout.lines().next().unwrap().parse().unwrap();
    let expected = format!("[fixed]\n[a b]\n[{evil}]\n[;]\n[--flag]\nV=[x y] P=[2]\n");
    assert_eq!(f.logs(id), expected);
    assert!(!pwned.exists(), "an argument was run by a shell");
    let run = f.run(id);
    assert_eq!(
        run["args"],
        serde_json::json!(["a b", evil, ";", "--flag"]),
        "{run}"
    );
    assert_eq!(
        run["env"],
        serde_json::json!({"V": "x y", "P": "2"}),
        "{run}"
    );
    // The retry (attempt 2) ran with the same arguments and variables.
    let retry = f
        .runs()
        .into_iter()
        .find(|r| r["retry_of"] == id)
        .expect("a retry");
    assert_eq!(retry["args"], run["args"], "{retry}");
    assert_eq!(retry["env"], run["env"], "{retry}");
    assert_eq!(f.logs(retry["id"].as_i64().unwrap()), expected);
}

#[test]
fn a_project_without_accept_args_refuses_them() {
    let f = Fleet::with(echo_args);
    for args in [
        &["enqueue", "closed", "--", "x"][..],
        &["enqueue", "--env", "A=b", "closed"][..],
    ] {
        let out = f.cmd(args);
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("\"closed\"") && out.stderr.contains("accept_args"),
            "{out:?}"
        );
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    }
    assert!(f.runs().is_empty(), "nothing may be queued");
    // Without arguments it is an ordinary enqueue.
    f.enqueue("closed");
}

#[test]
fn bad_variable_names_are_refused() {
    let f = Fleet::with(echo_args);
    for bad in ["NOEQUALS", "=v", "FLEET_RUN_ID=1", "FAILPOINTS=x"] {
        let out = f.cmd(&["enqueue", "--env", bad, "echo"]);
        assert_eq!(out.code(), Some(2), "{bad}: {out:?}");
        // The whole argument as given, quoted: `--env =v` names "=v", not an empty name.
        assert!(
            out.stderr.contains(&format!("--env {bad:?}")),
            "{bad}: {out:?}"
        );
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    }
    assert!(f.runs().is_empty(), "nothing may be queued");
}

#[test]
fn accept_args_must_be_a_boolean() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\naccept_args = \"yes\"\n");
    let out = f.cmd(&["validate"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stdout.contains("accept_args") || out.stderr.contains("accept_args"),
        "{out:?}"
    );
}
