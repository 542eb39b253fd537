//! Every `--json` prints one JSON value on stdout, whatever happens: its report, or
//! `{"error": MESSAGE}` when it fails without one (the one-line message is on stderr as
//! always, and the exit status is unchanged).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::common::*;

/// The commands whose help offers `--json`: the register the cases below must cover.
fn commands_with_json(f: &Fleet) -> BTreeSet<String> {
    let help = f.cmd_ok(&["--help"]);
    let mut out = BTreeSet::new();
    for name in subcommands(&help) {
        if f.cmd_ok(&[name.as_str(), "--help"]).contains("--json") {
            out.insert(name);
        }
    }
    out
}

/// The subcommands `fleet --help` lists (the lines indented under `Commands:`), `help` aside.
pub fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Runs `fleet ARGS` and returns its stdout as the one JSON value it must be, with the exit
/// code.
fn json_of(f: &Fleet, args: &[&str]) -> (Value, Option<i32>) {
    let out = f.cmd(args);
    let text = out.stdout.trim_end();
    assert_eq!(
        text.lines().count(),
        1,
        "fleet {args:?} should print one JSON value on one line: {out:?}"
    );
    let value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("fleet {args:?} printed no JSON ({e}): {out:?}"));
    (value, out.code())
}

/// Asserts `fleet ARGS` exits `code` printing `{"error": ...}` that names `names`, and the
/// same message on stderr.
fn assert_error(f: &Fleet, args: &[&str], code: i32, names: &str) {
    let (v, got) = json_of(f, args);
    assert_eq!(got, Some(code), "fleet {args:?}: {v}");
    let message = v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("fleet {args:?}: no \"error\" string in {v}"));
    assert!(message.contains(names), "fleet {args:?}: {v}");
}

#[test]
fn every_json_command_prints_json_errors_included() {
    let f = Fleet::new("[projects.hello]\ncommand = [\"echo\", \"hi\"]\n");
    let covered: BTreeSet<String> = ["runs", "status", "check", "projects", "hosts"]
        .map(String::from)
        .into();
    assert_eq!(
        commands_with_json(&f),
        covered,
        "a command offers --json: cover its errors here"
    );

    // No database yet: reports, not text.
    let (v, code) = json_of(&f, &["check", "--json"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert!(
        v["note"]
            .as_str()
            .is_some_and(|n| n.contains("no database")),
        "{v}"
    );
    let (v, code) = json_of(&f, &["runs", "--json"]);
    assert_eq!((v, code), (Value::Array(vec![]), Some(0)));

    // Bad input and usage errors.
    assert_error(&f, &["runs", "--json", "--status", "bogus"], 2, "bogus");
    assert_error(&f, &["runs", "--json", "--limit", "many"], 2, "many");
    assert_error(&f, &["status", "--json", "--bogus-flag"], 2, "--bogus-flag");
    assert_error(&f, &["check", "--json", "extra"], 2, "extra");
    assert_error(&f, &["projects", "--json", "extra"], 2, "extra");
    assert_error(&f, &["hosts", "--json", "extra"], 2, "extra");

    // A config that cannot be read at all.
    let missing = f.file("missing.toml");
    for cmd in covered.iter() {
        let mut c = f.command_with_config(&missing);
        c.args([cmd.as_str(), "--json"]);
        let out = run_with_deadline(c, CMD_DEADLINE);
        assert_eq!(out.code(), Some(2), "{cmd}: {out:?}");
        let v: Value = serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("{cmd} --json printed no JSON ({e}): {out:?}"));
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|m| m.contains("missing.toml")),
            "{cmd}: {v}"
        );
        assert!(out.stderr.contains("missing.toml"), "{cmd}: {out:?}");
    }

    // An invalid config that still says where the state directory is: `status`, `runs` and
    // `hosts` report what is there, one value only, and exit as they would (the file's errors
    // are a warning on stderr, and in `status`'s report); `check` and `projects` need the file.
    f.write_config("[projects.hello]\ncommand = [\"echo\"]\ntimout = \"1s\"\n");
    let (v, code) = json_of(&f, &["status", "--json"]);
    assert_eq!(code, Some(3), "no daemon: {v}");
    assert!(v["config_errors"].is_array(), "{v}");
    assert!(v.get("error").is_none(), "{v}");
    let (v, code) = json_of(&f, &["runs", "--json"]);
    assert_eq!((v, code), (Value::Array(vec![]), Some(0)));
    let (v, code) = json_of(&f, &["hosts", "--json"]);
    assert_eq!((v, code), (Value::Array(vec![]), Some(0)));
    assert_error(&f, &["check", "--json"], 2, "timout");
    assert_error(&f, &["projects", "--json"], 2, "timout");
}
