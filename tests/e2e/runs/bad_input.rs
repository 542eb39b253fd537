//! Bad input exits 2 with one line naming what was wrong: unknown projects and runs, an invalid
//! config (file, line and key), a missing program or cwd (the run fails, the daemon goes on),
//! an unusable state directory; and `--state-dir` still reaches the runs while the config is
//! broken.

use crate::common::*;

fn assert_one_line_exit_2(out: &Output, names: &[&str], what: &str) {
    assert_eq!(out.code(), Some(2), "{what}: {out:?}");
    let err = out.stderr.trim();
    assert_eq!(
        err.lines().count(),
        1,
        "{what}: stderr should be one line: {err:?}"
    );
    for n in names {
        assert!(err.contains(n), "{what}: stderr should name {n:?}: {err:?}");
    }
}

#[test]
fn bad_input_exits_2_naming_what_was_wrong() {
    let f = Fleet::new("[projects.ok]\ncommand = [\"true\"]\n");
    // Before any state exists, and after.
    for round in 0..2 {
        let out = f.cmd(&["enqueue", "nosuchproject"]);
        assert_one_line_exit_2(&out, &["nosuchproject"], "enqueue nosuchproject");
        assert!(out.stdout.is_empty(), "{out:?}");
        let out = f.cmd(&["logs", "99999"]);
        assert_one_line_exit_2(&out, &["99999"], "logs 99999");
        let out = f.cmd(&["cancel", "99999"]);
        assert_one_line_exit_2(&out, &["99999"], "cancel 99999");
        let out = f.cmd(&["runs", "--status", "bogus"]);
        assert_eq!(out.code(), Some(2), "runs --status bogus: {out:?}");
        assert!(out.stderr.contains("bogus"), "{out:?}");
        if round == 0 {
            f.enqueue("ok");
        }
    }
}

/// The `fleet.toml:<line>` a one-line error names, if any.
fn named_line(err: &str) -> Option<usize> {
    let rest = &err[err.find("fleet.toml:")? + "fleet.toml:".len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

#[test]
fn invalid_config_names_file_line_and_key() {
    // A typo beside a valid command: the only error is the unknown key, on line 5.
    let f = Fleet::new(
        "max_concurrency = 4\n\
         \n\
         [projects.hello]\n\
         command = [\"echo\", \"hi\"]\n\
         timout = \"10s\"\n",
    );
    let out = f.cmd(&["enqueue", "hello"]);
    assert_one_line_exit_2(&out, &["fleet.toml:5", "timout"], "enqueue");
    // The commands that need only the state directory the file names go on, and say what is
    // wrong with the file: `runs` lists (none), `status` says no daemon runs (3).
    for (args, code) in [(&["runs"][..], 0), (&["status"][..], 3)] {
        let out = f.cmd(args);
        assert_eq!(out.code(), Some(code), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("warning")
                && out.stderr.contains("fleet.toml:5")
                && out.stderr.contains("timout"),
            "{args:?}: {out:?}"
        );
    }
    let out = f.cmd(&["validate"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains("fleet.toml:5") && l.contains("timout")),
        "{out:?}"
    );

    // The typo in place of `command` (so `command` is missing too): the one-line message names
    // a line and the project's key; `validate` lists the typo with its line.
    f.write_config(
        "max_concurrency = 4\n\
         \n\
         [projects.hello]\n\
         comand = [\"echo\", \"hi\"]\n",
    );
    let out = f.cmd(&["enqueue", "hello"]);
    assert_one_line_exit_2(
        &out,
        &["fleet.toml:", "projects.hello"],
        "enqueue with `comand`",
    );
    assert!(
        matches!(named_line(&out.stderr), Some(3 | 4)),
        "the message should name line 3 or 4: {out:?}"
    );
    let out = f.cmd(&["validate"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains("fleet.toml:4") && l.contains("comand")),
        "{out:?}"
    );
    // The daemon refuses it too, and creates no database.
    let out = f.cmd(&["daemon"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("fleet.toml:"), "{out:?}");
    assert!(!f.state_dir().join("fleet.db").exists());
}

#[test]
fn missing_program_and_bad_cwd_fail_and_the_daemon_keeps_going() {
    let f = Fleet::new(
        "[projects.noprog]\ncommand = [\"/nonexistent/prog\", \"arg\"]\n\
         [projects.badcwd]\ncommand = [\"true\"]\ncwd = \"no/such/dir\"\n\
         [projects.ok]\ncommand = [\"sh\", \"-c\", \"echo still here\"]\n",
    );
    let mut d = f.start_daemon();
    let noprog = f.enqueue("noprog");
    let badcwd = f.enqueue("badcwd");

    let r = f.wait_terminal(noprog);
    assert_eq!(status_of(&r), "failed", "{r}");
    let reason = r["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("/nonexistent/prog"),
        "reason should name the program: {r}"
    );
    assert!(
        f.logs(noprog).contains("/nonexistent/prog"),
        "the log should say so"
    );

    let r = f.wait_terminal(badcwd);
    assert_eq!(status_of(&r), "failed", "{r}");
    let reason = r["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("no/such/dir"),
        "reason should name the cwd: {r}"
    );
    assert!(
        f.logs(badcwd).contains("no/such/dir"),
        "the log should say so"
    );

    d.assert_alive();
    let ok = f.enqueue("ok");
    let r = f.wait_terminal(ok);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(f.logs(ok), "still here\n");
    d.assert_alive();
}

#[test]
fn unusable_state_dir_is_named() {
    let f = Fleet::new("state_dir = \"afile/state\"\n[projects.ok]\ncommand = [\"true\"]\n");
    std::fs::write(f.file("afile"), "a regular file, not a folder\n").unwrap();
    let out = f.cmd(&["enqueue", "ok"]);
    assert_one_line_exit_2(&out, &["afile/state"], "enqueue with an unusable state dir");
    assert!(out.stdout.is_empty(), "no run id may be printed: {out:?}");

    let out = f.cmd(&["daemon"]);
    assert!(
        !out.status.success() && out.code().is_some(),
        "the daemon must refuse to start: {out:?}"
    );
    assert!(out.stderr.contains("afile/state"), "{out:?}");
}

/// `--state-dir` reaches the runs while fleet.toml is broken: an operator can still list, read
/// and cancel them, while the commands that read the config refuse the broken file (exit 2).
#[test]
fn state_dir_flag_works_while_the_config_is_broken() {
    let f = Fleet::new("[projects.p]\ncommand = [\"sleep\", \"30\"]\n");
    let id = f.enqueue("p");
    // Broken where a `state_dir` line could be: where the state is cannot be known.
    std::fs::write(&f.config, "state_dir = = \"elsewhere\"\n").unwrap();
    assert_eq!(f.cmd(&["runs"]).code(), Some(2));
    let state = f.state_dir();
    let state = state.to_str().unwrap();
    let out = f.cmd(&["--state-dir", state, "runs", "--json"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let runs: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(runs[0]["id"], id);
    let out = f.cmd(&["--state-dir", state, "cancel", &id.to_string()]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let out = f.cmd(&["--state-dir", state, "runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(runs[0]["status"], "cancelled");
    // The daemon and enqueue take their state directory from the config only.
    assert_eq!(
        f.cmd(&["--state-dir", state, "enqueue", "p"]).code(),
        Some(2)
    );
    // A mistyped one is said, never shown as an install with no runs.
    let typo = format!("{state}-typo");
    for cmd in [&["runs"][..], &["check"], &["status"]] {
        let mut argv = vec!["--state-dir", typo.as_str()];
        argv.extend_from_slice(cmd);
        let out = f.cmd(&argv);
        assert_eq!(out.code(), Some(2), "{cmd:?}: {out:?}");
        assert!(
            out.stderr.contains("no such directory") && out.stderr.contains(&typo),
            "{cmd:?}: {out:?}"
        );
    }
}
