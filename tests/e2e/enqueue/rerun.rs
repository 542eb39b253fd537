//! `fleet rerun`: a new run of the same project with the same arguments and variables, trigger
//! `rerun`, linked to the run it repeats.

use crate::common::*;

#[test]
fn rerun_repeats_a_run_with_its_arguments() {
    let f = Fleet::new(&format!(
        "[projects.echo]\naccept_args = true\ncommand = [\"sh\", \"-c\", {}, \"sh\"]\n",
        toml_str("echo \"$* V=$V\"")
    ));
    let _d = f.start_daemon();
    let out = f.cmd_ok(&[
        "enqueue", "--wait", "--env", "V=v", "echo", "--", "one", "two",
    ]);
    let first: i64 = out.lines().next().unwrap().parse().unwrap();
    let out = f.cmd_ok(&["rerun", &first.to_string()]);
    let second: i64 = out.trim().parse().expect("rerun prints the new id alone");
    assert_ne!(second, first);
    f.cmd_ok(&["wait", &second.to_string()]);
    let run = f.run(second);
    assert_eq!(run["trigger"], "rerun", "{run}");
    assert_eq!(run["rerun_of"], first, "{run}");
    assert_eq!(run["project"], "echo", "{run}");
    assert_eq!(run["args"], serde_json::json!(["one", "two"]), "{run}");
    assert_eq!(run["env"], serde_json::json!({"V": "v"}), "{run}");
    assert_eq!(f.logs(second), "one two V=v\n");
    assert_eq!(f.run(first)["rerun_of"], serde_json::Value::Null);
}

#[test]
fn rerun_of_an_unknown_run_or_a_removed_project_is_exit_2() {
    let f = Fleet::new(
        "[projects.gone]\ncommand = [\"true\"]\n[projects.stays]\ncommand = [\"true\"]\n",
    );
    let out = f.cmd(&["rerun", "7"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    let id = f.enqueue("gone");
    let out = f.cmd(&["rerun", "7777"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("unknown run id 7777"), "{out:?}");
    f.replace_config("[projects.stays]\ncommand = [\"true\"]\n");
    let out = f.cmd(&["rerun", &id.to_string()]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("\"gone\""), "{out:?}");
    assert_eq!(f.runs().len(), 1, "nothing queued");
}

/// A project that stopped accepting arguments refuses a rerun of a run that had some (exit 2,
/// one line naming the project), and queues nothing; a run without arguments still reruns.
#[test]
fn rerun_with_arguments_of_a_project_that_no_longer_accepts_them_is_exit_2() {
    let f = Fleet::new("[projects.echo]\naccept_args = true\ncommand = [\"true\"]\n");
    let with_args: i64 = f
        .cmd_ok(&["enqueue", "echo", "--", "one"])
        .trim()
        .parse()
        .unwrap();
    let with_env: i64 = f
        .cmd_ok(&["enqueue", "--env", "V=v", "echo"])
        .trim()
        .parse()
        .unwrap();
    let plain = f.enqueue("echo");
    f.replace_config("[projects.echo]\naccept_args = false\ncommand = [\"true\"]\n");
    for id in [with_args, with_env] {
        let out = f.cmd(&["rerun", &id.to_string()]);
        assert_eq!(out.code(), Some(2), "{out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(out.stderr.contains("\"echo\""), "{}", out.stderr);
    }
    assert_eq!(f.runs().len(), 3, "nothing queued");
    f.cmd_ok(&["rerun", &plain.to_string()]);
    assert_eq!(f.runs().len(), 4);
}

/// The retries of a rerun link to it through `retry_of` (trigger `retry`) and carry no
/// `rerun_of`, which marks the run `fleet rerun` made; they keep its arguments.
#[test]
fn retries_of_a_rerun_are_not_reruns() {
    // No backoff: each retry would wait the default 10 s otherwise, for nothing this test looks
    // at.
    let f = Fleet::new(
        "[projects.p]\naccept_args = true\nretries = 1\nretry_backoff = \"0s\"\n\
         command = [\"sh\", \"-c\", \"exit 3\", \"sh\"]\n",
    );
    let _d = f.start_daemon();
    let out = f.cmd(&["enqueue", "--wait", "p", "--", "x"]);
    assert_eq!(out.code(), Some(3), "{out:?}");
    let first: i64 = out.stdout.lines().next().unwrap().parse().unwrap();
    let rerun: i64 = f
        .cmd_ok(&["rerun", &first.to_string()])
        .trim()
        .parse()
        .unwrap();
    assert_eq!(f.cmd(&["wait", &rerun.to_string()]).code(), Some(3));
    let retry = f
        .runs()
        .into_iter()
        .find(|r| r["retry_of"] == rerun)
        .unwrap_or_else(|| panic!("no retry of {rerun}: {:?}", f.runs()));
    assert_eq!(retry["trigger"], "retry", "{retry}");
    assert_eq!(retry["rerun_of"], serde_json::Value::Null, "{retry}");
    assert_eq!(retry["args"], serde_json::json!(["x"]), "{retry}");
    assert_eq!(f.run(rerun)["rerun_of"], first);
}
