//! The property: a hundred and fifty mutated fleet.toml texts through reload on one daemon, each
//! applied or refused naming the line, with `fleet validate` and `fleet status` agreeing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::reload::*;
use super::validate::*;
use crate::common::*;

/// The property of live edits: 150 mutated fleet.toml texts go through `fleet reload`
/// on one daemon: the valid originals; truncations (at any byte, at a line boundary) and
/// dropped lines, which may or may not be valid; duplicate keys and tables; and one or two
/// faults at known lines — wrong types, unknown keys, bad cron, zero or negative caps and
/// weights, empty commands or program names, unknown namespaces, bad durations. Each text is
/// either applied (the caps `fleet status` shows are the text's, read independently with the
/// `toml` crate) or refused leaving the last good config in force, with every error naming the
/// file and a line, and — where the faults are known — exactly one error per fault, naming its
/// line and key. `fleet validate` prints the same errors, `fleet status` shows them, and `fleet
/// reload` exits 2 exactly when they exist. Quick runs go through the daemon meanwhile; the
/// daemon is alive after all of them and `fleet check` passes. Cases: 150 (each costs two
/// reloads, each waiting for the file to be read unchanged for 300 ms), or `LIVE_EDIT_CASES`.
#[test]
fn mutated_configs_are_applied_or_refused_naming_the_line() {
    use super::mutations::*;
    use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
    use proptest::{prop_assert, prop_assert_eq};

    let cases: u32 = std::env::var("LIVE_EDIT_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let f = Fleet::new("max_concurrency = 2\n[projects.p0]\ncommand = [\"true\"]\n");
    let mut d = start(&f);
    let pid = d.pid();
    let path = f.config.display().to_string();
    let started = Instant::now();
    let n = AtomicU64::new(0);
    let counts = std::sync::Mutex::new(BTreeMap::<String, usize>::new());
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 32,
        ..Config::default()
    });
    let result = runner.run(&(model(), mutation()), |(m, mutation)| {
        let (text, expect) = mutate(&m, &mutation);
        let i = n.fetch_add(1, Ordering::SeqCst);
        if matches!(i % 20, 0) {
            // A run through the daemon now and then (the sentinel config has p0 = `true`).
            apply_sentinel(&f);
            f.enqueue("p0");
        }
        let verdict = assert_agree(&f, &text);
        let nlines = text.lines().count();
        let outcome = match &verdict {
            Err(e) => {
                let mut named = Vec::new();
                for l in e.lines() {
                    let rest = l.strip_prefix(&format!("{path}:")).ok_or_else(|| {
                        TestCaseError::fail(format!("error line does not name the file: {l}"))
                    })?;
                    let line: usize = rest
                        .split(':')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| {
                            TestCaseError::fail(format!("error line names no line: {l}"))
                        })?;
                    prop_assert!(
                        (1..=nlines + 1).contains(&line),
                        "line {} out of range in {}:\n{}",
                        line,
                        l,
                        text
                    );
                    named.push(line);
                }
                match &expect {
                    Expect::Applied => {
                        return Err(TestCaseError::fail(format!(
                            "a valid text was refused: {e}\n{text}"
                        )))
                    }
                    Expect::Refused(want) => {
                        for (line, key) in want {
                            let prefix = format!("{path}:{line}: {key}:");
                            prop_assert!(
                                e.lines().any(|l| l.starts_with(&prefix)),
                                "expected an error starting {:?}, got:\n{}\ntext:\n{}",
                                prefix,
                                e,
                                text
                            );
                        }
                        prop_assert_eq!(
                            named.len(),
                            want.len(),
                            "one error per fault: {}\ntext:\n{}",
                            e,
                            text
                        );
                    }
                    Expect::Either => {}
                }
                "refused"
            }
            Ok(s) => {
                if let Expect::Refused(want) = &expect {
                    return Err(TestCaseError::fail(format!(
                        "applied a text with faults at {want:?}:\n{text}\n{s}"
                    )));
                }
                let (global, ns) = caps_of(&text);
                prop_assert_eq!(global_cap(s), Some(global), "global cap of:\n{}", text);
                prop_assert_eq!(declared(s), ns, "namespaces of:\n{}", text);
                "applied"
            }
        };
        *counts
            .lock()
            .unwrap()
            .entry(format!("{} {outcome}", name(&mutation)))
            .or_default() += 1;
        prop_assert!(!process_gone(pid), "the daemon is gone after:\n{}", text);
        Ok(())
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, (m, mutation))) => {
            let (text, expect) = mutate(&m, &mutation);
            panic!(
                "{why}\nmutation {mutation:?}, expected {expect:?}, text:\n{text}\n{}",
                f.diagnostics()
            );
        }
        Err(e) => panic!("{e}"),
    }
    eprintln!(
        "{} texts in {:?}: {:#?}",
        n.load(Ordering::SeqCst),
        started.elapsed(),
        counts.lock().unwrap()
    );
    d.assert_alive();
    let s = status_any(&f);
    assert_eq!(s["daemon"]["pid"], pid, "{s}");
    // Back to a good file; every run ends; the checker finds nothing.
    apply_sentinel(&f);
    f.wait_until(DEADLINE, "every run to end", || {
        f.runs().iter().all(is_terminal)
    });
    let runs = f.runs();
    assert!(!runs.is_empty());
    for r in &runs {
        assert!(
            status_of(r) == "succeeded"
                || (status_of(r) == "cancelled" && r["reason"] == "project removed"),
            "{r}"
        );
    }
    assert_check_ok(&f);
    d.assert_alive();
}
