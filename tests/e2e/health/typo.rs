//! A typo in fleet.toml must not fail a health check. The daemon keeps its last good config
//! when a reload is refused; `fleet status` goes on answering for it (0, 1 or 3) and says the
//! file is invalid on stderr, and the commands that need nothing from the file but where the
//! state is (`runs`, `logs`, `wait`, `cancel`, `hosts`) work and warn. The state directory
//! must still come from somewhere certain: the file's own `state_dir`, read on its own; when
//! that cannot be known (a syntax error before it, or the key itself mistyped), they refuse as
//! before, naming the file's error.

use serde_json::Value;

use crate::common::*;

/// A config with its own state directory (`st`, not the default), a quick project and a long
/// one; with `typo`, `q` has a key fleet does not know (`timout`, line 5).
fn config(typo: bool) -> String {
    format!(
        "state_dir = \"st\"\ntick = \"100ms\"\n\
         [projects.q]\ncommand = [\"sh\", \"-c\", \"echo hi\"]\n{}\
         [projects.slow]\ncommand = [\"sleep\", \"60\"]\n",
        if typo { "timout = \"10s\"\n" } else { "" }
    )
}

/// Asserts `out` exited `code` and warned on stderr that fleet.toml is invalid, naming the
/// key.
fn assert_warns(out: &Output, code: i32, what: &str) {
    assert_eq!(out.code(), Some(code), "{what}: {out:?}");
    assert!(
        out.stderr.contains("fleet: warning:")
            && out
                .stderr
                .contains("fleet.toml:5: projects.q.timout: unknown key"),
        "{what} must say the file is invalid: {out:?}"
    );
}

#[test]
fn a_typo_in_an_unrelated_key_leaves_status_and_the_state_readable() {
    let f = Fleet::new(&config(false));
    let d = f.start_daemon();
    let quick = f.enqueue("q");
    assert_eq!(status_of(&f.wait_terminal(quick)), "succeeded");
    let slow = f.enqueue("slow");
    f.wait_status(slow, "running");

    // A typo, and a reload the daemon refuses: it keeps its last good config.
    f.write_config(&config(true));
    let out = f.cmd(&["reload"]);
    assert_eq!(out.code(), Some(2), "reload of an invalid file: {out:?}");
    f.wait_until(DEADLINE, "the daemon to record the refused reload", || {
        let out = f.cmd(&["status", "--json"]);
        serde_json::from_str::<Value>(&out.stdout)
            .is_ok_and(|s| !s["daemon"]["last_reload_error"].is_null())
    });

    let out = f.cmd(&["status"]);
    assert_warns(&out, 0, "fleet status");
    assert!(out.stdout.starts_with("daemon: running"), "{out:?}");
    assert!(
        out.stdout.contains(&f.file("st").display().to_string()),
        "{out:?}"
    );
    let out = f.cmd(&["status", "--json"]);
    assert_warns(&out, 0, "fleet status --json");
    let s: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(s["daemon"]["state"], "running", "{s}");
    assert!(
        s["config_errors"].as_array().is_some_and(|e| !e.is_empty()),
        "{s}"
    );

    let out = f.cmd(&["runs", "--json"]);
    assert_warns(&out, 0, "fleet runs");
    let runs: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(runs.as_array().map(Vec::len), Some(2), "{runs}");
    let out = f.cmd(&["logs", &quick.to_string()]);
    assert_warns(&out, 0, "fleet logs");
    assert_eq!(out.stdout, "hi\n");
    assert_warns(&f.cmd(&["wait", &quick.to_string()]), 0, "fleet wait");
    assert_warns(&f.cmd(&["hosts", "--json"]), 0, "fleet hosts");
    let out = f.cmd(&["cancel", &slow.to_string()]);
    assert_warns(&out, 0, "fleet cancel");
    assert_eq!(
        f.cmd(&["wait", "--timeout", "60s", &slow.to_string()])
            .code(),
        Some(1),
        "the cancelled run ends cancelled"
    );

    // What needs the file itself still refuses it, naming the error.
    for args in [&["enqueue", "q"][..], &["projects"], &["check"], &["prune"]] {
        let out = f.cmd(args);
        assert_eq!(out.code(), Some(2), "fleet {args:?}: {out:?}");
        assert!(out.stderr.contains("projects.q.timout"), "{out:?}");
    }

    // Stopped: 3, still with the warning.
    drop(d);
    assert_warns(&f.cmd(&["status"]), 3, "fleet status without a daemon");
}

/// Where the state directory cannot be known for certain, nothing is read from a folder that
/// may be the wrong one: exit 2 with the file's error, as before.
#[test]
fn a_state_directory_that_cannot_be_known_is_refused() {
    let f = Fleet::new(&config(false));
    let id = f.enqueue("q");
    for (text, error) in [
        // A syntax error before `state_dir`: what follows cannot be read.
        (
            format!("tick = \"1s\n{}", config(false)),
            "fleet.toml:1: tick: invalid TOML",
        ),
        // `state_dir` itself mistyped: the default folder would be the wrong one.
        (
            config(false).replace("state_dir", "stat_dir"),
            "fleet.toml:1: stat_dir: unknown key",
        ),
        // A syntax error on the `state_dir` line.
        (
            config(false).replace("\"st\"", "\"st"),
            "fleet.toml:1: state_dir: invalid TOML",
        ),
    ] {
        f.write_config(&text);
        for args in [&["status"][..], &["runs"], &["logs", &id.to_string()]] {
            let out = f.cmd(args);
            assert_eq!(out.code(), Some(2), "fleet {args:?} with {text:?}: {out:?}");
            assert!(
                out.stderr.contains(error),
                "fleet {args:?} with {text:?}: {out:?}"
            );
            // Nothing read, nor a report about another folder.
            assert!(
                out.stdout.is_empty(),
                "fleet {args:?} with {text:?}: {out:?}"
            );
        }
    }
    assert!(!f.state_dir().exists(), "the default folder was never made");

    // A syntax error after the top-level keys (in a project): `state_dir` is certain.
    f.write_config(&format!(
        "{}[projects.broken]\ncommand = [\n",
        config(false)
    ));
    let out = f.cmd(&["runs", "--json"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains(&format!("\"id\":{id}")), "{out:?}");
    assert!(out.stderr.contains("fleet: warning:"), "{out:?}");
}
