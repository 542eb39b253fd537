//! What every key shares: syntax errors, duplicate and unknown keys, wrong types, and all
//! errors reported together in line order.

use super::{errors, one, path, project};
use crate::Config;

#[test]
fn syntax_errors_name_line_and_key() {
    let (line, key) = one(
        "tick = \"1s\"\n[projects.hello]\ncommand = [\"x\"\n",
        "invalid TOML",
    );
    assert_eq!(line, 3);
    assert_eq!(key, "projects.hello.command");

    let (line, key) = one("tick = \"1s\"\nmax_concurrency = = 3\n", "invalid TOML");
    assert_eq!((line, key.as_str()), (2, "max_concurrency"));

    let (line, key) = one("\n\n[projects.hello\n", "invalid TOML");
    assert_eq!((line, key.as_str()), (3, "projects.hello"));

    let (line, key) = one("\"unterminated\n", "invalid TOML");
    assert_eq!((line, key.as_str()), (1, "(syntax)"));
}

#[test]
fn duplicate_keys_and_tables_are_errors() {
    let (line, _) = one("tick = \"1s\"\n\ntick = \"2s\"\n", "duplicate key");
    assert_eq!(line, 3);
    let text = "[projects.a]\ncommand = [\"x\"]\n\n[projects.a]\ncommand = [\"y\"]\n";
    let (line, key) = one(text, "duplicate key");
    assert_eq!((line, key.as_str()), (4, "projects.a"));
}

#[test]
fn unknown_keys_are_errors_at_every_level() {
    let (line, key) = one("tick = \"1s\"\nticks = \"1s\"\n", "unknown key");
    assert_eq!((line, key.as_str()), (2, "ticks"));

    let (line, key) = one(
        "[namespaces.ops]\nmax_concurrency = 1\nwieght = 2\n",
        "expected one of max_concurrency, weight",
    );
    assert_eq!((line, key.as_str()), (3, "namespaces.ops.wieght"));

    let errs = errors("[projects.hello]\ncommand = [\"x\"]\n\ncomand = [\"x\"]\n");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].0, 4);
    assert_eq!(errs[0].1, "projects.hello.comand");
    assert!(errs[0].2.starts_with(
        "unknown key; expected one of command, namespace, cwd, env, timeout, kill_grace, retries, \
         retry_backoff, schedule, timezone, starting_deadline, overlap"
    ));

    let (line, key) = one(
        "[projects.hello]\ncommand = [\"x\"]\n[projects.hello.extra]\nx = 1\n",
        "unknown key",
    );
    assert_eq!((line, key.as_str()), (3, "projects.hello.extra"));
}

#[test]
fn wrong_types_are_errors() {
    let (line, key) = one(
        "\nmax_concurrency = \"4\"\n",
        "expected an integer, found string \"4\"",
    );
    assert_eq!((line, key.as_str()), (2, "max_concurrency"));

    let (line, key) = one(
        "[projects.hello]\ncommand = \"echo hi\"\n",
        "expected an array of strings",
    );
    assert_eq!((line, key.as_str()), (2, "projects.hello.command"));

    let (line, key) = one(&project("\n\ncommand2 = 1"), "unknown key");
    assert_eq!((line, key.as_str()), (5, "projects.p.command2"));

    let (line, key) = one(
        "[projects.hello]\ncommand = [\"echo\", 1]\n",
        "expected a string, found integer 1",
    );
    assert_eq!((line, key.as_str()), (2, "projects.hello.command[1]"));

    let (line, key) = one("projects = 1\n", "expected a table");
    assert_eq!((line, key.as_str()), (1, "projects"));

    let (line, key) = one(
        "[[projects]]\ncommand = [\"x\"]\n",
        "expected a table, found array",
    );
    assert_eq!((line, key.as_str()), (1, "projects"));

    let (line, key) = one("[projects]\nhello = \"x\"\n", "expected a table");
    assert_eq!((line, key.as_str()), (2, "projects.hello"));

    let (line, key) = one(&project("timeout = 10"), "expected a duration string");
    assert_eq!((line, key.as_str()), (3, "projects.p.timeout"));

    let (line, key) = one(&project("namespace = 3"), "expected a string");
    assert_eq!((line, key.as_str()), (3, "projects.p.namespace"));

    let (line, key) = one("tick = 1.5\n", "expected a duration string");
    assert_eq!((line, key.as_str()), (1, "tick"));
}

#[test]
fn all_errors_are_reported_together_in_line_order() {
    let text = r#"state_dir = ""
max_concurrency = 0
tick = "fast"
bogus = 1

[namespaces.ops]
max_concurrency = "2"
weight = -1

[projects.hello]
comand = ["x"]
namespace = "nope"
timeout = "10x"
schedule = "every day"
timezone = "Nowhere/City"
overlap = "sometimes"
retries = -3
env = { A = 1 }

[projects.bad-cmd]
command = []
"#;
    let errs = errors(text);
    let got: Vec<(usize, &str)> = errs.iter().map(|(l, k, _)| (*l, k.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (1, "state_dir"),
            (2, "max_concurrency"),
            (3, "tick"),
            (4, "bogus"),
            (7, "namespaces.ops.max_concurrency"),
            (8, "namespaces.ops.weight"),
            (10, "projects.hello.command"),
            (11, "projects.hello.comand"),
            (12, "projects.hello.namespace"),
            (13, "projects.hello.timeout"),
            (14, "projects.hello.schedule"),
            (15, "projects.hello.timezone"),
            (16, "projects.hello.overlap"),
            (17, "projects.hello.retries"),
            (18, "projects.hello.env.A"),
            (21, "projects.bad-cmd.command"),
        ]
    );
    let shown = Config::parse(text, path()).unwrap_err().to_string();
    assert_eq!(shown.lines().count(), got.len());
    assert!(shown.lines().all(|l| l.starts_with("fleet.toml:")));
}
