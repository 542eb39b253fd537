//! One clock for the fleet: three hosts on one database, `a` on the machine's clock, `b` 45 s
//! ahead and `c` 45 s behind (libfaketime, the wall clock only: the monotonic clock stays
//! true). Time is judged by the database's clock, so each host is alive in everyone's eyes, no
//! forget without `--force` is accepted, and a 5-second schedule runs each occurrence once, on
//! time by the database's clock (the PostgreSQL server runs on the machine's), none skipped —
//! while `b` and `c` say that their clocks are off: in their logs, `fleet hosts`, `fleet status`
//! and `/metrics`.
//!
//! libfaketime (Debian's `faketime` package) is required like PostgreSQL: missing, the test
//! says `SKIPPED` and passes, unless `FLEET_REQUIRE_POSTGRES=1` or `CI=true` (where `.ci/run`
//! installs it), where it fails.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::harness::Hosts;
use super::markers::HOST_VAR;
use crate::common::http_client::{get, http_address};
use crate::common::*;

/// The skew of each host: `FAKETIME`'s offset (none for `a`).
const SKEWS: [(&str, Option<&str>); 3] = [("a", None), ("b", Some("+45")), ("c", Some("-45"))];

/// The libfaketime library, or `None` after a loud skip line (a failure where it is required).
fn libfaketime() -> Option<PathBuf> {
    let found = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|d| PathBuf::from(d).join("faketime/libfaketime.so.1"))
    .find(|p| p.exists());
    if found.is_none() {
        let required = std::env::var("FLEET_REQUIRE_POSTGRES").is_ok_and(|v| v == "1")
            || std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !required,
            "libfaketime not found (Debian's `faketime` package): required under FLEET_REQUIRE_POSTGRES=1 or CI=true"
        );
        eprintln!("SKIPPED: libfaketime not found (install Debian's `faketime` package)");
    }
    found
}

/// The environment that shifts a process's wall clock by `skew` seconds (and nothing else).
fn skewed_env(lib: &std::path::Path, skew: Option<&str>) -> Vec<(String, String)> {
    match skew {
        None => Vec::new(),
        Some(s) => vec![
            ("LD_PRELOAD".into(), lib.display().to_string()),
            ("FAKETIME".into(), s.into()),
            // tokio's timers and every elapsed time fleet measures stay true.
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ],
    }
}

/// `fleet ARGS` run on host `name`, under that host's clock.
fn on_host(h: &Hosts, lib: &std::path::Path, name: &str, args: &[&str]) -> Output {
    let skew = SKEWS.iter().find(|(n, _)| *n == name).unwrap().1;
    let mut c = h.fleet(name).command();
    c.args(args);
    for (k, v) in skewed_env(lib, skew) {
        c.env(k, v);
    }
    run_with_deadline(c, CMD_DEADLINE)
}

#[test]
fn hosts_whose_clocks_are_off_are_alive_unforgettable_and_fire_on_the_database_s_time() {
    let Some(lib) = libfaketime() else { return };
    let Some(h) = Hosts::new(&["a", "b", "c"], |shared| {
        // Each run says its occurrence and when it started by the machine's clock (libfaketime
        // left out for `date`), which is the database server's.
        let rec = shared.join("ticks");
        format!(
            "http_listen = \"127.0.0.1:0\"\n\
             [projects.tick]\nschedule = \"*/5 * * * * *\"\noverlap = \"queue\"\n\
             command = {}\n",
            sh(&format!(
                "echo $FLEET_RUN_ID $FLEET_OCCURRENCE $(env -u LD_PRELOAD date +%s%3N) ${HOST_VAR} >> {}",
                shell_quote(&rec)
            ))
        )
    }) else {
        return;
    };
    let daemons: Vec<_> = SKEWS
        .iter()
        .map(|(name, skew)| {
            let mut env = skewed_env(&lib, *skew);
            env.push((HOST_VAR.into(), name.to_string()));
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            h.fleet(name).start_daemon_env(&env)
        })
        .collect();

    // Every host alive, as every host sees it (each command under its own host's clock), with
    // its clock's offset measured.
    let offsets = |from: &str| -> BTreeMap<String, (String, Option<f64>, Option<bool>)> {
        let out = on_host(&h, &lib, from, &["hosts", "--json"]);
        assert_eq!(out.code(), Some(0), "fleet hosts on {from}: {}", out.stderr);
        let list: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
        list.iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_string(),
                    (
                        r["state"].as_str().unwrap().to_string(),
                        r["clock_offset_s"].as_f64(),
                        r["clock_skewed"].as_bool(),
                    ),
                )
            })
            .collect()
    };
    h.wait_until(
        DEADLINE,
        "every host's heartbeat to carry its clock's offset",
        || {
            let seen = offsets("a");
            seen.len() == 3 && seen.values().all(|(_, off, _)| off.is_some())
        },
    );
    let expected = [("a", 0.0, false), ("b", 45.0, true), ("c", -45.0, true)];
    for (from, _) in SKEWS {
        let seen = offsets(from);
        for (name, off, skewed) in expected {
            let (state, measured, said) = &seen[name];
            assert_eq!(
                state,
                "alive",
                "on {from}, host {name}: {seen:?}\n{}",
                h.diagnostics()
            );
            let measured = measured.unwrap();
            assert!(
                (measured - off).abs() < 2.0,
                "on {from}, host {name}'s offset is {measured}, not about {off}: {seen:?}"
            );
            assert_eq!(*said, Some(skewed), "on {from}, host {name}: {seen:?}");
        }
    }
    // The table says it too, marked.
    let table = on_host(&h, &lib, "a", &["hosts"]).stdout;
    assert!(
        table.contains("CLOCK") && table.contains("+45.") && table.contains("-45."),
        "{table}"
    );

    // No forget without --force, from any host, of any host.
    for (from, _) in SKEWS {
        for (name, _) in SKEWS {
            let out = on_host(&h, &lib, from, &["hosts", "forget", name]);
            assert_eq!(
                out.code(),
                Some(1),
                "`fleet hosts forget {name}` on {from} was not refused:\n{}\n{}\n{}",
                out.stdout,
                out.stderr,
                h.diagnostics()
            );
            assert!(out.stderr.contains("is alive"), "{}", out.stderr);
        }
    }

    // The warnings: each skewed host's log, its `fleet status` and its /metrics.
    for (d, name, skew, words) in [
        (&daemons[1], "b", 45.0, "s ahead of the database's"),
        (&daemons[2], "c", -45.0, "s behind the database's"),
    ] {
        let log = d.stderr();
        assert!(
            log.contains("this host's clock is 45.") && log.contains(words),
            "host {name}'s log does not say its clock is off:\n{log}"
        );
        let out = on_host(&h, &lib, name, &["status", "--json"]);
        let status: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("status on {name}: {e}\n{}\n{}", out.stdout, out.stderr));
        assert_eq!(status["clock_skewed"], Value::Bool(true), "{status}");
        let off = status["clock_offset_s"].as_f64().unwrap();
        assert!((off - skew).abs() < 2.0, "{status}");
        let text = on_host(&h, &lib, name, &["status"]).stdout;
        assert!(text.contains("clock: this host's clock is 45."), "{text}");
        let metrics = get(&http_address(d), "/metrics").text();
        let line = metrics
            .lines()
            .find(|l| l.starts_with("fleet_clock_offset_seconds "))
            .unwrap_or_else(|| panic!("no clock offset in host {name}'s metrics:\n{metrics}"));
        let value: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!((value - skew).abs() < 2.0, "{line}");
    }
    let a_log = daemons[0].stderr();
    assert!(
        !a_log.contains("this host's clock is"),
        "host a's clock is the database's:\n{a_log}"
    );

    // The schedule: six occurrences in a row, each run once, none early by the database's
    // clock (the machine's), none skipped between the first and the last.
    let rec = h.shared().join("ticks");
    let ticks = || -> Vec<(i64, i64, i64, String)> {
        std::fs::read_to_string(&rec)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((
                    f.first()?.parse().ok()?,
                    crate::common::time::parse_rfc3339(f.get(1)?),
                    f.get(2)?.parse().ok()?,
                    f.get(3)?.to_string(),
                ))
            })
            .collect()
    };
    h.wait_until(
        Duration::from_secs(90),
        "six occurrences of the 5-second schedule to run",
        || ticks().len() >= 6,
    );
    let runs = ticks();
    let mut occurrences: Vec<i64> = runs.iter().map(|r| r.1).collect();
    occurrences.sort();
    let mut unique = occurrences.clone();
    unique.dedup();
    assert_eq!(unique, occurrences, "an occurrence ran twice: {runs:?}");
    for pair in occurrences.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            5_000,
            "an occurrence was skipped: {runs:?}"
        );
    }
    for (id, occurrence, started, host) in &runs {
        assert!(
            *started >= occurrence - 1_000,
            "run {id} of occurrence {occurrence} started {} ms early (on host {host}): {runs:?}",
            occurrence - started
        );
    }
    // Each host claims: skewed hosts are hosts like any other. A run's end is written in the
    // database's time whichever host ran it: a tick lasts milliseconds, never 45 s or less than
    // nothing (its shim records its end by its host's clock; the daemon moves it by its offset).
    eprintln!("runs (id, occurrence, started, host): {runs:?}");
    let out = on_host(&h, &lib, "a", &["runs", "--json"]);
    let rows: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    let ms = |r: &Value, key: &str| r[key].as_str().map(crate::common::time::parse_rfc3339);
    for r in rows.iter().filter(|r| r["status"] == "succeeded") {
        let (Some(started), Some(finished)) = (ms(r, "started_at"), ms(r, "finished_at")) else {
            continue;
        };
        assert!(
            (0..15_000).contains(&(finished - started)),
            "run {} on host {} ran from {started} to {finished}: its end is not in the database's time",
            r["id"],
            r["host"]
        );
    }
}
