//! `fleet pause` / `fleet resume`: a held project or namespace keeps its queued runs (across a
//! daemon restart), skips its occurrences, and starts again on resume.

use serde_json::Value;

use crate::common::restart::eval_barrier;
use crate::common::time::parse_rfc3339;
use crate::common::*;

/// The runs of `project`, newest first, as `fleet runs --json` shows them.
fn runs_of(f: &Fleet, project: &str) -> Vec<Value> {
    f.runs_with(&["--project", project])
}

/// A paused namespace holds its queued runs, also across a SIGKILL and restart of the daemon;
/// `fleet resume` releases them, and `fleet status` shows the pause meanwhile.
#[test]
fn a_paused_namespace_holds_its_queue_across_a_restart_until_resumed() {
    let f = Fleet::with(|dir| {
        format!(
            "[namespaces.ops]\nmax_concurrency = 2\n\
             [projects.a]\ncommand = {}\nnamespace = \"ops\"\n\
             [projects.b]\ncommand = {}\n",
            quick_recorder(dir, "rec"),
            quick_recorder(dir, "rec"),
        )
    });
    let mut d1 = f.start_daemon();
    let out = f.cmd_ok(&["pause", "ops"]);
    assert!(out.contains("paused namespace ops"), "{out}");
    let held: Vec<i64> = (0..2).map(|_| f.enqueue("a")).collect();
    // Another namespace is not held.
    let free = f.enqueue("b");
    assert_eq!(status_of(&f.wait_terminal(free)), "succeeded");
    eval_barrier(&f, 3);
    for &id in &held {
        assert_eq!(status_of(&f.run(id)), "queued", "{}", f.diagnostics());
    }
    let status = f.status();
    assert_eq!(status["paused"][0]["kind"], "namespace", "{status}");
    assert_eq!(status["paused"][0]["name"], "ops", "{status}");
    let text = f.cmd_ok(&["status"]);
    assert!(text.contains("paused: namespace ops"), "{text}");

    d1.kill();
    let _d2 = f.start_daemon();
    eval_barrier(&f, 3);
    for &id in &held {
        assert_eq!(
            status_of(&f.run(id)),
            "queued",
            "after restart: {}",
            f.diagnostics()
        );
    }
    assert!(
        !read_records(&f.file("rec"))
            .iter()
            .any(|r| r.project == "a"),
        "a held run started"
    );

    let out = f.cmd_ok(&["resume", "ops"]);
    assert!(out.contains("resumed namespace ops"), "{out}");
    for &id in &held {
        assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    }
    assert_eq!(f.status()["paused"], serde_json::json!([]));
    assert_check_ok(&f);
}

/// A schedule firing every second on a paused project records each occurrence as a skipped
/// run (reason "paused") and starts nothing; after `fleet resume` it fires again, and only
/// occurrences from then on (no burst of the held ones).
#[test]
fn a_paused_schedule_records_skips_and_fires_again_after_resume() {
    let f = Fleet::new("[projects.job]\ncommand = [\"true\"]\nschedule = \"* * * * * *\"\n");
    // Paused before any daemon runs: the pause is in the database, not in a daemon.
    f.cmd_ok(&["pause", "job"]);
    let _d = f.start_daemon();
    f.wait_until(DEADLINE, "two occurrences skipped as paused", || {
        runs_of(&f, "job")
            .iter()
            .filter(|r| {
                status_of(r) == "cancelled" && r["reason"].as_str().unwrap_or("").contains("paused")
            })
            .count()
            >= 2
    });
    assert!(
        runs_of(&f, "job")
            .iter()
            .all(|r| status_of(r) == "cancelled"),
        "a run of a paused project started: {:?}",
        runs_of(&f, "job")
    );
    let resumed_at = now_ms();
    f.cmd_ok(&["resume", "job"]);
    f.wait_until(DEADLINE, "a run after resume", || {
        runs_of(&f, "job")
            .iter()
            .any(|r| status_of(r) == "succeeded")
    });
    for r in runs_of(&f, "job")
        .iter()
        .filter(|r| status_of(r) != "cancelled")
    {
        let occurrence = r["occurrence"].as_str().unwrap_or("");
        let at = parse_rfc3339(occurrence);
        // Whole seconds: the occurrence due at the instant of the resume may start.
        assert!(
            at >= resumed_at - 1000,
            "an occurrence held while paused fired after resume: {r}"
        );
    }
}

/// Names: an unknown name is exit 2; a name that is both a project and a namespace needs
/// `--project` or `--namespace`; the flags are checked against the config.
#[test]
fn pause_names_are_checked() {
    let f = Fleet::new(
        "[namespaces.x]\nmax_concurrency = 1\n\
         [projects.x]\ncommand = [\"true\"]\nnamespace = \"x\"\n\
         [projects.y]\ncommand = [\"true\"]\n",
    );
    let out = f.cmd(&["pause", "nope"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("nope"), "{}", out.stderr);
    let out = f.cmd(&["pause", "x"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains("--project or --namespace"),
        "{}",
        out.stderr
    );
    let out = f.cmd(&["pause", "--namespace", "y"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(f
        .cmd_ok(&["pause", "--project", "x"])
        .contains("paused project x"));
    assert!(f
        .cmd_ok(&["pause", "--project", "x"])
        .contains("already paused"));
    assert!(f
        .cmd_ok(&["resume", "--project", "x"])
        .contains("resumed project x"));
    assert!(f
        .cmd_ok(&["resume", "--project", "x"])
        .contains("was not paused"));
    let out = f.cmd(&["resume", "nope"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
}
