//! Each key's own rules: caps, durations, commands, namespaces, schedules, time zones, overlap,
//! env, retries and names.

use std::time::Duration;

use super::{one, path, project};
use crate::{parse_schedule, Config};

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

/// Every cap stops at a million: a bigger one was cut to 32 bits (2^32 became 0, and nothing
/// ever started), and on PostgreSQL each unit of a cap is a row the claim counts.
#[test]
fn caps_stop_at_a_million() {
    let accepted = "max_concurrency = 1_000_000\n[namespaces.ops]\nmax_concurrency = 1000000\n\
                    [hosts.h]\nmax_concurrency = 1000000\n\
                    [projects.p]\ncommand = [\"true\"]\nmax_parallel = 1000000\n";
    Config::parse(accepted, path()).unwrap();
    for (toml, line, key) in [
        ("max_concurrency = 4294967296\n", 1, "max_concurrency"),
        (
            "max_concurrency = 18446744073709551615\n",
            1,
            "max_concurrency",
        ),
        (
            "[namespaces.ops]\nmax_concurrency = 1000001\n",
            2,
            "namespaces.ops.max_concurrency",
        ),
        (
            "[hosts.h]\nmax_concurrency = 1000001\n",
            2,
            "hosts.h.max_concurrency",
        ),
    ] {
        let (l, k) = one(toml, "must be at most 1000000");
        assert_eq!((l, k.as_str()), (line, key), "{toml}");
    }
    let (l, k) = one(
        &project("max_parallel = 4294967295"),
        "must be at most 1000000",
    );
    assert_eq!((l, k.as_str()), (3, "projects.p.max_parallel"));
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
    let (line, key) = one(&project("kill_grace = \"-1s\""), "cannot be negative");
    assert_eq!((line, key.as_str()), (3, "projects.p.kill_grace"));
    let (line, key) = one(&project("timeout = \"0s\""), "greater than zero");
    assert_eq!((line, key.as_str()), (3, "projects.p.timeout"));

    // zero is fine where it means something
    let c = Config::parse(
        &project("kill_grace = \"0s\"\nretry_backoff = \"0s\""),
        path(),
    )
    .unwrap();
    assert_eq!(c.project("p").unwrap().kill_grace, Duration::ZERO);

    // A starting deadline under a second would skip occurrences a running daemon sees on time.
    for short in ["0s", "500ms", "999ms"] {
        let (line, key) = one(
            &project(&format!("starting_deadline = \"{short}\"")),
            "every occurrence would be skipped",
        );
        assert_eq!((line, key.as_str()), (3, "projects.p.starting_deadline"));
    }
    let c = Config::parse(&project("starting_deadline = \"1s\""), path()).unwrap();
    assert_eq!(
        c.project("p").unwrap().starting_deadline,
        Some(Duration::from_secs(1))
    );
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
    // Macros, field names and never-firing expressions: tests/cron.rs.
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

/// A `database` URL the driver would take but not as written — a malformed percent-escape in
/// the password, a `connect_timeout` that is not a number of seconds — is one error naming the
/// file, line and key, and never repeating the password.
#[test]
fn odd_database_urls_are_refused_without_their_password() {
    for (url, needle) in [
        (
            "postgres://u:hunter2%zz@h/db",
            "the password holds a malformed percent-escape",
        ),
        (
            "postgres://u:hunter2@h/db?connect_timeout=-5",
            "`connect_timeout` must be a whole number of seconds",
        ),
        (
            "postgres://u:hunter2@h/db?connect_timeout=soon",
            "`connect_timeout` must be a whole number of seconds",
        ),
    ] {
        let text = format!("max_concurrency = 2\ndatabase = \"{url}\"\n");
        let errs = super::errors(&text);
        assert_eq!(errs.len(), 1, "{url}: {errs:#?}");
        let (line, key, message) = &errs[0];
        assert_eq!((*line, key.as_str()), (2, "database"), "{url}");
        assert!(message.contains(needle), "{url}: {message}");
        let shown = Config::parse(&text, path()).unwrap_err().to_string();
        assert_eq!(shown.lines().count(), 1, "{shown}");
        assert!(shown.starts_with("fleet.toml:2: database: "), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
