//! `fleet validate` runs exactly the check the daemon runs: for bad and good texts alike, the
//! daemon's verdict, `fleet validate`, `fleet status` and `fleet reload`'s exit code agree.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::reload::*;
use crate::common::*;

/// The error lines `fleet validate` printed (each starts with the file's path).
pub fn validate_lines(f: &Fleet, out: &Output) -> Vec<String> {
    let prefix = format!("{}:", f.config.display());
    out.stderr
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(String::from)
        .collect()
}

static SENTINEL: AtomicU64 = AtomicU64::new(1000);

/// Applies a config whose global cap (1000 and up) no other text in these tests uses, and waits
/// until the daemon shows it with no error. After this, a reload of any other text is seen as
/// either an error or a different global cap — a "processed" signal that cannot be confused with
/// an earlier reload. Returns the sentinel cap.
pub fn apply_sentinel(f: &Fleet) -> i64 {
    let cap = SENTINEL.fetch_add(1, Ordering::SeqCst) as i64;
    f.replace_config(&format!(
        "max_concurrency = {cap}\n[projects.p0]\ncommand = [\"true\"]\n"
    ));
    f.cmd_ok(&["reload"]);
    wait_applied(f, cap, "the sentinel config to be applied");
    cap
}

/// What the daemon made of a text: `Err(message)` refused, `Ok(status)` applied.
pub fn feed(f: &Fleet, text: &str) -> (Result<Value, String>, i32) {
    let sentinel = apply_sentinel(f);
    f.replace_config(text);
    let reload = f.cmd(&["reload"]);
    let s = wait_status(f, "the daemon to process the text", |s| {
        reload_error(s).is_some() || global_cap(s) != Some(sentinel)
    });
    let code = reload.code().unwrap_or(-1);
    match reload_error(&s) {
        Some(e) => {
            assert_eq!(
                global_cap(&s),
                Some(sentinel),
                "a refused text changed the caps in force: {s}"
            );
            (Err(e), code)
        }
        None => (Ok(s), code),
    }
}

/// The daemon and `fleet validate` agree on `text`: both refuse it with the same errors (also
/// the same as `fleet status`'s config_errors), or both accept it. Returns the daemon's verdict.
pub fn assert_agree(f: &Fleet, text: &str) -> Result<Value, String> {
    let (verdict, reload_code) = feed(f, text);
    let out = f.cmd(&["validate"]);
    match &verdict {
        Err(e) => {
            assert_eq!(
                out.code(),
                Some(2),
                "validate accepts what the daemon refused ({e}):\n{text}"
            );
            let daemon_lines: Vec<String> = e.lines().map(String::from).collect();
            assert_eq!(
                validate_lines(f, &out),
                daemon_lines,
                "validate and the daemon report different errors for:\n{text}"
            );
            let s = status_any(f);
            let file_errors: Vec<String> = s["config_errors"]
                .as_array()
                .unwrap_or_else(|| panic!("no config_errors: {s}"))
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect();
            assert_eq!(file_errors, daemon_lines, "status config_errors: {s}");
            assert_eq!(reload_code, 2, "`fleet reload` of an invalid file exits 2");
        }
        Ok(_) => {
            assert_eq!(
                out.code(),
                Some(0),
                "validate refuses what the daemon applied:\n{text}\n{}",
                out.stderr
            );
            assert_eq!(reload_code, 0);
        }
    }
    verdict
}

#[test]
fn validate_and_the_daemon_agree() {
    let f = Fleet::new("max_concurrency = 2\n[projects.p0]\ncommand = [\"true\"]\n");
    let mut d = start(&f);
    let path = f.config.display().to_string();
    // (text, the line and key every refusal must name)
    let bad: &[(&str, &str)] = &[
        (
            "max_concurrency = 2\n[projects.p0]\ncomand = [\"true\"]\n",
            "3: projects.p0.comand",
        ),
        (
            "max_concurrency = \"2\"\n[projects.p0]\ncommand = [\"true\"]\n",
            "1: max_concurrency",
        ),
        (
            "max_concurrency = 2\n[projects.p0]\ncommand = [\"true\"]\nschedule = \"61 * * * *\"\n",
            "4: projects.p0.schedule",
        ),
        (
            "max_concurrency = 0\n[projects.p0]\ncommand = [\"true\"]\n",
            "1: max_concurrency",
        ),
        (
            "[namespaces.a]\nmax_concurrency = -1\n[projects.p0]\ncommand = [\"true\"]\n",
            "2: namespaces.a.max_concurrency",
        ),
        ("[projects.p0]\ncommand = []\n", "2: projects.p0.command"),
        (
            "[projects.p0]\ncommand = [\"true\"]\nnamespace = \"nowhere\"\n",
            "3: projects.p0.namespace",
        ),
        (
            "[projects.p0]\ncommand = [\"true\"]\n[projects.p0]\ncommand = [\"true\"]\n",
            "3: projects.p0",
        ),
        (
            "[projects.p0]\ncommand = [\"true\"\n",
            "2: projects.p0.command",
        ),
        (
            "[projects.p0]\ncommand = [\"true\"]\ntimeout = \"10x\"\n",
            "3: projects.p0.timeout",
        ),
        ("tick = 5\n[projects.p0]\ncommand = [\"true\"]\n", "1: tick"),
        (
            "[projects.p0]\ncommand = [\"true\"]\ntimezone = \"Mars/Olympus\"\n",
            "3: projects.p0.timezone",
        ),
        ("[projects.p0]\n", "1: projects.p0.command"),
    ];
    for (text, named) in bad {
        match assert_agree(&f, text) {
            Err(e) => assert!(
                e.contains(&format!("{path}:{named}")),
                "the refusal should name {named}: {e}\n{text}"
            ),
            Ok(s) => panic!("the daemon applied an invalid file:\n{text}\n{s}"),
        }
        d.assert_alive();
    }
    // (text, global cap, declared namespaces as (name, cap, weight))
    type Good<'a> = (&'a str, i64, &'a [(&'a str, i64, i64)]);
    let good: &[Good<'_>] = &[
        ("max_concurrency = 3\n[projects.p0]\ncommand = [\"true\"]\n", 3, &[]),
        ("[projects.p0]\ncommand = [\"true\"]\n", 4, &[]),
        (
            "max_concurrency = 5\n[namespaces.a]\nmax_concurrency = 2\nweight = 3\n[projects.p0]\ncommand = [\"true\"]\nnamespace = \"a\"\nschedule = \"0 30 6 * * 1-5\"\n",
            5,
            &[("a", 2, 3)],
        ),
        ("", 4, &[]),
    ];
    for (text, global, ns) in good {
        match assert_agree(&f, text) {
            Ok(s) => {
                assert_eq!(global_cap(&s), Some(*global), "{text}\n{s}");
                let want: BTreeMap<String, (i64, i64)> = ns
                    .iter()
                    .map(|(n, c, w)| (n.to_string(), (*c, *w)))
                    .collect();
                assert_eq!(declared(&s), want, "{text}\n{s}");
            }
            Err(e) => panic!("the daemon refused a valid file ({e}):\n{text}"),
        }
        d.assert_alive();
    }
    assert_check_ok(&f);
}
