use super::*;

use proptest::prelude::*;

const FULL: &str = r#"# every key
state_dir = "var/state"
max_concurrency = 8
tick = "250ms"

[namespaces.ops]
max_concurrency = 2
weight = 3

[namespaces.batch]
max_concurrency = 1

[projects.hello]
command = ["sh", "-c", "echo hello from $FLEET_PROJECT"]
namespace = "ops"
cwd = "work/./dir"
env = { GREETING = "hi", EMPTY = "" }
timeout = "10m"
kill_grace = "3s"
retries = 2
retry_backoff = "1m 30s"
schedule = "*/5 * * * *"
timezone = "Europe/Paris"
starting_deadline = "5m"
overlap = "replace"

[projects."tidy.up-2"]
command = ["true"]
namespace = "default"
schedule = "30 0 6 * * 1-5"
overlap = "queue"

[projects.minimal]
command = ["true"]
"#;

fn path() -> &'static Path {
    Path::new("fleet.toml")
}

/// (line, key, message) of every error `text` yields.
fn errors(text: &str) -> Vec<(usize, String, String)> {
    match Config::parse(text, path()) {
        Ok(c) => panic!("expected errors, parsed {c:#?}"),
        Err(ConfigErrors(errs)) => errs
            .into_iter()
            .map(|e| {
                assert_eq!(e.file, path());
                (
                    e.line.expect("every parse error has a line"),
                    e.key,
                    e.message,
                )
            })
            .collect(),
    }
}

/// The single error `text` yields, as (line, key), after checking its message contains `needle`.
fn one(text: &str, needle: &str) -> (usize, String) {
    let errs = errors(text);
    assert_eq!(errs.len(), 1, "expected one error, got {errs:#?}");
    let (line, key, message) = errs.into_iter().next().unwrap();
    assert!(
        message.contains(needle),
        "message {message:?} should contain {needle:?}"
    );
    (line, key)
}

fn project(body: &str) -> String {
    format!("[projects.p]\ncommand = [\"true\"]\n{body}\n")
}

#[test]
fn full_valid_file_parses_every_key() {
    let c = Config::parse(FULL, path()).unwrap();
    let dir = std::fs::canonicalize(".").unwrap();
    assert_eq!(c.path, PathBuf::from("fleet.toml"));
    assert_eq!(c.dir, dir);
    assert_eq!(c.state_dir, dir.join("var/state"));
    assert_eq!(c.max_concurrency, 8);
    assert_eq!(c.tick, Duration::from_millis(250));
    assert_eq!(
        c.namespaces,
        BTreeMap::from([
            (
                "ops".to_string(),
                NamespaceConfig {
                    max_concurrency: 2,
                    weight: 3
                }
            ),
            (
                "batch".to_string(),
                NamespaceConfig {
                    max_concurrency: 1,
                    weight: 1
                }
            ),
        ])
    );
    assert_eq!(c.projects.len(), 3);
    assert_eq!(
        c.project("hello").unwrap(),
        &ProjectConfig {
            name: "hello".into(),
            command: vec![
                "sh".into(),
                "-c".into(),
                "echo hello from $FLEET_PROJECT".into()
            ],
            namespace: "ops".into(),
            cwd: dir.join("work/dir"),
            env: BTreeMap::from([
                ("GREETING".to_string(), "hi".to_string()),
                ("EMPTY".to_string(), String::new()),
            ]),
            timeout: Some(Duration::from_secs(600)),
            kill_grace: Duration::from_secs(3),
            retries: 2,
            retry_backoff: Duration::from_secs(90),
            schedule: Some("*/5 * * * *".into()),
            timezone: Some("Europe/Paris".into()),
            starting_deadline: Some(Duration::from_secs(300)),
            overlap: Overlap::Replace,
        }
    );
    let tidy = c.project("tidy.up-2").unwrap();
    assert_eq!(tidy.namespace, DEFAULT_NAMESPACE);
    assert_eq!(tidy.schedule.as_deref(), Some("30 0 6 * * 1-5"));
    assert_eq!(tidy.overlap, Overlap::Queue);
    assert!(c.project("nope").is_none());
}

#[test]
fn omitted_keys_take_their_defaults() {
    let c = Config::parse(FULL, path()).unwrap();
    let dir = std::fs::canonicalize(".").unwrap();
    assert_eq!(
        c.project("minimal").unwrap(),
        &ProjectConfig {
            name: "minimal".into(),
            command: vec!["true".into()],
            namespace: DEFAULT_NAMESPACE.into(),
            cwd: dir.clone(),
            env: BTreeMap::new(),
            timeout: None,
            kill_grace: Duration::from_secs(10),
            retries: 0,
            retry_backoff: Duration::from_secs(10),
            schedule: None,
            timezone: None,
            starting_deadline: None,
            overlap: Overlap::Forbid,
        }
    );

    let empty = Config::parse("", path()).unwrap();
    assert_eq!(empty.state_dir, dir.join(".fleet"));
    assert_eq!(empty.max_concurrency, 4);
    assert_eq!(empty.tick, Duration::from_secs(1));
    assert!(empty.namespaces.is_empty());
    assert!(empty.projects.is_empty());
}

#[test]
fn example_in_docs_is_valid() {
    let doc = std::fs::read_to_string(docs_path()).unwrap();
    let start = doc.find("```toml\n").expect("CONFIG.md has a toml example") + 8;
    let len = doc[start..].find("```").unwrap();
    let c = Config::parse(&doc[start..start + len], path()).unwrap();
    for (key, _) in KEYS {
        // every key is shown in the example
        let leaf = key.rsplit('.').next().unwrap();
        assert!(
            doc[start..start + len].contains(&format!("{leaf} =")),
            "{key}"
        );
    }
    assert!(c.project("hello").is_some());
}

#[test]
fn relative_paths_resolve_against_the_files_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let sub = tmp.path().join("conf");
    std::fs::create_dir(&sub).unwrap();
    let file = sub.join("fleet.toml");
    std::fs::write(
        &file,
        "state_dir = \"../state\"\n[projects.a]\ncommand = [\"x\"]\ncwd = \"jobs/a\"\n\
         [projects.b]\ncommand = [\"x\"]\ncwd = \"/abs/where\"\n",
    )
    .unwrap();
    let c = Config::load(&file).unwrap();
    let dir = std::fs::canonicalize(&sub).unwrap();
    assert_eq!(c.path, file);
    assert_eq!(c.dir, dir);
    assert!(c.state_dir.is_absolute());
    assert_eq!(c.state_dir, dir.join("../state"));
    assert_eq!(c.project("a").unwrap().cwd, dir.join("jobs/a"));
    assert_eq!(c.project("b").unwrap().cwd, PathBuf::from("/abs/where"));

    // A relative path to a file that does not exist still gives an absolute dir.
    let c = Config::parse("", Path::new("no/such/dir/fleet.toml")).unwrap();
    assert!(c.dir.is_absolute());
    assert!(c.dir.ends_with("no/such/dir"));
    assert_eq!(c.state_dir, c.dir.join(".fleet"));
}

#[test]
fn load_reports_an_unreadable_file() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("fleet.toml");
    let errs = Config::load(&missing).unwrap_err();
    assert_eq!(errs.0.len(), 1);
    assert_eq!(errs.0[0].file, missing);
    assert_eq!(errs.0[0].line, None);
    let shown = errs.to_string();
    assert!(shown.starts_with(&format!("{}: cannot read file", missing.display())));

    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, b"tick = \"1s\"\n# caf\xe9\n").unwrap();
    let errs = Config::load(&bad).unwrap_err();
    assert_eq!(errs.0[0].line, Some(2));
    assert!(errs.0[0].message.contains("UTF-8"));
}

#[test]
fn error_display_is_file_line_key_message() {
    let errs = Config::parse(
        "tick = \"1s\"\n[projects.hello]\ncommand = [\"x\"]\ntimeout = \"10x\"\n",
        path(),
    )
    .unwrap_err();
    let shown = errs.to_string();
    assert!(
        shown.starts_with(
            "fleet.toml:4: projects.hello.timeout: invalid duration \"10x\": unknown time unit \"x\""
        ),
        "{shown}"
    );
    assert!(!shown.contains('\n'));
}

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
fn caps_must_be_positive() {
    let (line, key) = one("max_concurrency = 0\n", "must be at least 1, found 0");
    assert_eq!((line, key.as_str()), (1, "max_concurrency"));
    let (line, key) = one("\nmax_concurrency = -2\n", "must be at least 1, found -2");
    assert_eq!((line, key.as_str()), (2, "max_concurrency"));

    let (line, key) = one("[namespaces.ops]\nmax_concurrency = 0\n", "at least 1");
    assert_eq!((line, key.as_str()), (2, "namespaces.ops.max_concurrency"));

    let (line, key) = one(
        "[namespaces.ops]\nmax_concurrency = 1\nweight = 0\n",
        "at least 1",
    );
    assert_eq!((line, key.as_str()), (3, "namespaces.ops.weight"));

    let (line, key) = one(
        "[namespaces.ops]\nmax_concurrency = 1\nweight = 4294967296\n",
        "at most 4294967295",
    );
    assert_eq!((line, key.as_str()), (3, "namespaces.ops.weight"));

    let (line, key) = one("\n[namespaces.ops]\nweight = 2\n", "missing required key");
    assert_eq!((line, key.as_str()), (2, "namespaces.ops.max_concurrency"));

    let (line, key) = one(
        "max_concurrency = 999999999999999999999999999999999999999999\n",
        "",
    );
    assert_eq!((line, key.as_str()), (1, "max_concurrency"));
}

#[test]
fn tick_must_be_positive_and_durations_must_parse() {
    let (line, key) = one("tick = \"0s\"\n", "greater than zero");
    assert_eq!((line, key.as_str()), (1, "tick"));
    // A tick so short that an idle daemon would spin is refused.
    let (line, key) = one("tick = \"1ns\"\n", "at least 100ms");
    assert_eq!((line, key.as_str()), (1, "tick"));

    let (line, key) = one(&project("timeout = \"10x\""), "invalid duration \"10x\"");
    assert_eq!((line, key.as_str()), (3, "projects.p.timeout"));
    let (line, key) = one(&project("kill_grace = \"soon\""), "invalid duration");
    assert_eq!((line, key.as_str()), (3, "projects.p.kill_grace"));
    let (line, key) = one(&project("retry_backoff = \"\""), "invalid duration");
    assert_eq!((line, key.as_str()), (3, "projects.p.retry_backoff"));
    let (line, key) = one(&project("starting_deadline = \"5\""), "invalid duration");
    assert_eq!((line, key.as_str()), (3, "projects.p.starting_deadline"));
    let (line, key) = one(&project("timeout = \"0s\""), "greater than zero");
    assert_eq!((line, key.as_str()), (3, "projects.p.timeout"));

    // zero is fine where it means something
    let c = Config::parse(
        &project("kill_grace = \"0s\"\nretry_backoff = \"0s\"\nstarting_deadline = \"0s\""),
        path(),
    )
    .unwrap();
    assert_eq!(c.project("p").unwrap().kill_grace, Duration::ZERO);
}

#[test]
fn commands_must_be_non_empty() {
    let (line, key) = one("[projects.p]\n\ncommand = []\n", "must not be empty");
    assert_eq!((line, key.as_str()), (3, "projects.p.command"));

    let (line, key) = one(
        "[projects.p]\ncommand = [\n  \"\",\n  \"arg\",\n]\n",
        "program name must not be empty",
    );
    assert_eq!((line, key.as_str()), (3, "projects.p.command[0]"));

    let (line, key) = one("\n[projects.p]\nretries = 1\n", "missing required key");
    assert_eq!((line, key.as_str()), (2, "projects.p.command"));

    // an empty argument after argv[0] is fine
    let c = Config::parse("[projects.p]\ncommand = [\"echo\", \"\"]\n", path()).unwrap();
    assert_eq!(c.project("p").unwrap().command, vec!["echo", ""]);
}

#[test]
fn projects_must_name_a_known_namespace() {
    let text = "[namespaces.ops]\nmax_concurrency = 1\n\n[projects.p]\ncommand = [\"x\"]\nnamespace = \"opz\"\n";
    let (line, key) = one(text, "unknown namespace \"opz\"; declared: default, ops");
    assert_eq!((line, key.as_str()), (6, "projects.p.namespace"));

    // "default" is always known, declared or not
    let c = Config::parse(&project("namespace = \"default\""), path()).unwrap();
    assert_eq!(c.project("p").unwrap().namespace, "default");
    let c = Config::parse(
        "[namespaces.default]\nmax_concurrency = 2\n[projects.p]\ncommand = [\"x\"]\n",
        path(),
    )
    .unwrap();
    assert_eq!(c.namespaces["default"].max_concurrency, 2);

    // a namespace with its own errors is still "declared": no cascade onto its projects
    let text = "[namespaces.ops]\nmax_concurrency = 0\n[projects.p]\ncommand = [\"x\"]\nnamespace = \"ops\"\n";
    let (line, _) = one(text, "at least 1");
    assert_eq!(line, 2);
}

#[test]
fn schedules_timezones_and_overlap_are_validated() {
    let (line, key) = one(
        &project("schedule = \"*/5 * * *\""),
        "invalid cron expression",
    );
    assert_eq!((line, key.as_str()), (3, "projects.p.schedule"));
    let (line, _) = one(
        &project("schedule = \"61 * * * *\""),
        "invalid cron expression",
    );
    assert_eq!(line, 3);
    let (line, _) = one(&project("schedule = \"0 0 0 * * * 2030\""), "found 7");
    assert_eq!(line, 3);
    let (line, _) = one(&project("schedule = \"@daily\""), "invalid cron expression");
    assert_eq!(line, 3);
    for good in [
        "*/5 * * * *",
        "0 0 * * MON-FRI",
        "*/10 * * * * *",
        "0 0 1,15 * 0",
    ] {
        let c = Config::parse(&project(&format!("schedule = \"{good}\"")), path()).unwrap();
        assert_eq!(c.project("p").unwrap().schedule.as_deref(), Some(good));
        assert!(parse_schedule(good).is_ok());
    }

    let (line, key) = one(&project("timezone = \"Mars/Olympus\""), "unknown time zone");
    assert_eq!((line, key.as_str()), (3, "projects.p.timezone"));
    // allowed without a schedule
    let c = Config::parse(&project("timezone = \"America/New_York\""), path()).unwrap();
    assert_eq!(
        c.project("p").unwrap().timezone.as_deref(),
        Some("America/New_York")
    );

    let (line, key) = one(
        &project("overlap = \"Forbid\""),
        "expected one of forbid, queue, replace",
    );
    assert_eq!((line, key.as_str()), (3, "projects.p.overlap"));
}

#[test]
fn env_values_must_be_strings_and_retries_non_negative() {
    let (line, key) = one(&project("env = { FLEET_RUN_ID = \"7\" }"), "reserved");
    assert_eq!((line, key.as_str()), (3, "projects.p.env.FLEET_RUN_ID"));

    let (line, key) = one(
        &project("[projects.p.env]\nA = \"1\"\nB = 2\n"),
        "expected a string, found integer 2",
    );
    assert_eq!((line, key.as_str()), (5, "projects.p.env.B"));

    let (line, key) = one(&project("env = \"A=1\""), "expected a table");
    assert_eq!((line, key.as_str()), (3, "projects.p.env"));

    let (line, key) = one(&project("env = { \"A=B\" = \"1\" }"), "invalid environment");
    assert_eq!((line, key.as_str()), (3, "projects.p.env.\"A=B\""));

    let (line, key) = one(&project("retries = -1"), "must not be negative, found -1");
    assert_eq!((line, key.as_str()), (3, "projects.p.retries"));
    let (line, _) = one(
        &project("retries = true"),
        "expected an integer, found boolean",
    );
    assert_eq!(line, 3);
}

#[test]
fn names_are_restricted() {
    let (line, key) = one(
        "[projects.\"hello world\"]\ncommand = [\"x\"]\n",
        "invalid project name \"hello world\"",
    );
    assert_eq!((line, key.as_str()), (1, "projects.\"hello world\""));

    let (line, key) = one(
        "\n[namespaces.\"\"]\nmax_concurrency = 1\n",
        "namespace name must not be empty",
    );
    assert_eq!((line, key.as_str()), (2, "namespaces.\"\""));

    let (line, _) = one(
        "[projects.\"ünïcode\"]\ncommand = [\"x\"]\n",
        "invalid project name",
    );
    assert_eq!(line, 1);

    let c = Config::parse(
        "[projects.\"a.b_c-D9\"]\ncommand = [\"x\"]\n[namespaces.\"x.y\"]\nmax_concurrency = 1\n",
        path(),
    )
    .unwrap();
    assert!(c.project("a.b_c-D9").is_some());
    assert!(c.namespaces.contains_key("x.y"));
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

#[test]
fn caps_reports_global_and_namespace_caps() {
    let c = Config::parse(FULL, path()).unwrap();
    let caps = c.caps();
    assert_eq!(caps.global, 8);
    assert_eq!(caps.namespaces.len(), 2);
    assert_eq!(caps.namespaces["ops"].max_concurrency, 2);
    assert_eq!(caps.namespaces["ops"].weight, 3);
    assert_eq!(caps.namespaces["batch"].max_concurrency, 1);
    assert_eq!(caps.namespaces["batch"].weight, 1);
}

fn docs_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CONFIG.md")
}

/// The register of keys and docs/CONFIG.md agree: every key in [`KEYS`] has a table row in the
/// doc (first cell `` `key` ``, third cell its default), and the doc documents no other key.
#[test]
fn keys_register_matches_docs_config_md() {
    let doc = std::fs::read_to_string(docs_path()).expect("docs/CONFIG.md is readable");
    let mut documented: BTreeMap<String, String> = BTreeMap::new();
    for line in doc.lines() {
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let first = cells[0];
        let Some(key) = first.strip_prefix('`').and_then(|k| k.strip_suffix('`')) else {
            continue;
        };
        let default = cells.get(2).copied().unwrap_or("").trim_matches('`');
        assert!(
            documented
                .insert(key.to_string(), default.to_string())
                .is_none(),
            "docs/CONFIG.md documents `{key}` twice"
        );
    }
    for (key, default) in KEYS {
        match documented.get(*key) {
            None => panic!("key `{key}` is in config::KEYS but not documented in docs/CONFIG.md"),
            Some(d) => assert_eq!(
                d, default,
                "docs/CONFIG.md gives `{key}` the default {d:?}, config::KEYS says {default:?}"
            ),
        }
    }
    for key in documented.keys() {
        assert!(
            KEYS.iter().any(|(k, _)| k == key),
            "docs/CONFIG.md documents `{key}`, which is not in config::KEYS"
        );
    }
}

/// The register drives the unknown-key check: every key in it is accepted where it belongs.
#[test]
fn every_registered_key_is_accepted() {
    let c = Config::parse(FULL, path()).unwrap();
    assert_eq!(c.projects.len(), 3);
    for (key, _) in KEYS {
        let leaf = key.rsplit('.').next().unwrap();
        assert!(FULL.contains(&format!("\n{leaf} =")), "FULL lacks {key}");
    }
    assert_eq!(
        allowed_keys(""),
        vec![
            "state_dir",
            "max_concurrency",
            "tick",
            "namespaces",
            "projects"
        ]
    );
}

#[test]
fn no_panic_on_any_prefix_of_a_valid_file() {
    for end in 0..=FULL.len() {
        if FULL.is_char_boundary(end) {
            let _ = Config::parse(&FULL[..end], path());
        }
    }
    // and on every suffix
    for start in 0..=FULL.len() {
        if FULL.is_char_boundary(start) {
            let _ = Config::parse(&FULL[start..], path());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_panic_on_garbage(text in "\\PC*") {
        let _ = Config::parse(&text, path());
    }

    #[test]
    fn no_panic_on_toml_like_garbage(
        text in "([a-z_.\\[\\]\"'=\\-0-9{}, \n*/#]|command|projects|namespaces|max_concurrency|schedule|timeout){0,120}"
    ) {
        let _ = Config::parse(&text, path());
    }

    #[test]
    fn no_panic_on_mutations_of_a_valid_file(
        edits in proptest::collection::vec((0usize..FULL.len(), any::<char>()), 1..6)
    ) {
        let mut text: Vec<char> = FULL.chars().collect();
        for (at, c) in edits {
            let at = at % text.len();
            text[at] = c;
        }
        let text: String = text.into_iter().collect();
        let _ = Config::parse(&text, path());
    }

    #[test]
    fn no_panic_on_any_value_of_any_key(
        key_index in 0usize..KEYS.len(),
        value in "(\"[^\"\\\\]{0,20}\"|-?[0-9]{1,25}|[0-9]\\.[0-9]|true|\\[\\]|\\[\"\"\\]|\\{\\}|1979-05-27)",
    ) {
        let (pattern, _) = KEYS[key_index];
        let text = match pattern.strip_prefix("projects.<name>.") {
            Some(leaf) => format!("[projects.p]\n{leaf} = {value}\n"),
            None => match pattern.strip_prefix("namespaces.<name>.") {
                Some(leaf) => format!("[namespaces.n]\n{leaf} = {value}\n"),
                None => format!("{pattern} = {value}\n"),
            },
        };
        let _ = Config::parse(&text, path());
    }
}
