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
