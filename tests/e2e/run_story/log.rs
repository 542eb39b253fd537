//! The daemon's log tells each run's story: a line when it is claimed, when its command starts,
//! when it ends (status, exit code or signal, duration) and when it cannot be started, each with
//! the run id and the project as fields. Values print plainly, never in Rust's debug syntax, in
//! the log and in `fleet check`.

use super::{gated, open_gate, stop, wait_ended_unrecorded};
use crate::common::*;

/// The lines of `log` that carry field `run=<id>`.
fn lines_of(log: &str, id: i64) -> Vec<String> {
    let field = format!("run={id}");
    log.lines()
        .filter(|l| l.split_whitespace().any(|w| w == field))
        .map(String::from)
        .collect()
}

/// The one line about run `id` whose message is `what`; panics, showing the log, when there is
/// none or several.
fn line(log: &str, id: i64, what: &str) -> String {
    let found: Vec<String> = lines_of(log, id)
        .into_iter()
        .filter(|l| l.contains(what))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {what:?} line for run {id}, found {found:#?} in:\n{log}"
    );
    found.into_iter().next().unwrap()
}

/// Waits until the daemon's log (`d`'s) has a `what` line about run `id`, and returns the log.
/// The daemon logs a run's transition just after it is written, so `fleet runs` can show the
/// run ended a moment before the line is there.
fn wait_logged(f: &Fleet, d: &Daemon<'_>, id: i64, what: &str) -> String {
    f.wait_until(
        DEADLINE,
        &format!("the daemon to log {what:?} for run {id}"),
        || lines_of(&d.stderr(), id).iter().any(|l| l.contains(what)),
    );
    d.stderr()
}

/// Whether `line` has the field `key=value` (a whole word).
fn has(line: &str, key: &str, value: &str) -> bool {
    let field = format!("{key}={value}");
    line.split_whitespace().any(|w| w == field)
}

/// The value of field `key` in `line`, up to the next space.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let prefix = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(prefix.as_str()))
}

/// Rust's debug syntax must never reach an operator.
fn assert_plain(text: &str) {
    for debug in [
        "Some(",
        "None",
        "ExitRecord",
        "Ended(",
        "Lost",
        "NeverStarted",
        "{ ",
        "[",
        "\"",
    ] {
        for l in text.lines() {
            // The tracing prefix is `<time> <LEVEL> <target>: `; only the message and fields
            // are the product's. A run's note (the last field) is free text: a command's own
            // error message, quoted as the shim wrote it.
            let body = l.split_once(": ").map_or(l, |(_, b)| b);
            let body = body.split_once(" note=").map_or(body, |(fields, _)| fields);
            assert!(
                !body.contains(debug),
                "debug syntax {debug:?} in {l:?}; whole text:\n{text}"
            );
        }
    }
}

#[test]
fn the_daemon_logs_claims_starts_and_ends_with_plain_fields() {
    let f = Fleet::new(&format!(
        "[projects.fine]\ncommand = {}\n\
         [projects.bad]\ncommand = {}\n\
         [projects.killed]\ncommand = {}\n\
         [projects.missing]\ncommand = [\"/nonexistent/fleet-test-program\"]\n",
        sh("exit 0"),
        sh("exit 3"),
        sh("kill -9 $$"),
    ));
    let d = f.start_daemon();
    let ids: Vec<(i64, &str)> = ["fine", "bad", "killed", "missing"]
        .into_iter()
        .map(|p| (f.enqueue(p), p))
        .collect();
    for (id, _) in &ids {
        f.wait_terminal(*id);
        wait_logged(&f, &d, *id, "run ended");
    }
    let log = d.stderr();
    for (id, project) in &ids {
        for what in ["run claimed", "run ended"] {
            let l = line(&log, *id, what);
            assert!(has(&l, "project", project), "{l}");
            assert!(l.contains(" INFO "), "logged at info: {l}");
        }
        assert!(has(&line(&log, *id, "run claimed"), "attempt", "1"));
    }
    let by = |p: &str| ids.iter().find(|(_, q)| *q == p).unwrap().0;

    let fine = line(&log, by("fine"), "run ended");
    assert!(has(&fine, "status", "succeeded"), "{fine}");
    assert!(has(&fine, "exit_code", "0"), "{fine}");
    let duration = field(&fine, "duration").unwrap_or_else(|| panic!("no duration: {fine}"));
    assert!(
        duration.ends_with('s') && duration[..duration.len() - 1].parse::<f64>().is_ok(),
        "duration in seconds: {fine}"
    );
    let started = line(&log, by("fine"), "run started");
    assert!(
        field(&started, "pid").is_some_and(|p| p.parse::<i32>().is_ok()),
        "{started}"
    );

    let bad = line(&log, by("bad"), "run ended");
    assert!(
        has(&bad, "status", "failed") && has(&bad, "exit_code", "3"),
        "{bad}"
    );

    let killed = line(&log, by("killed"), "run ended");
    assert!(
        has(&killed, "status", "failed") && has(&killed, "signal", "9"),
        "{killed}"
    );
    assert!(field(&killed, "exit_code").is_none(), "{killed}");

    let missing = line(&log, by("missing"), "run ended");
    assert!(has(&missing, "status", "failed"), "{missing}");
    assert!(missing.contains("could not start"), "the reason: {missing}");

    assert_plain(&log);
}

/// A shim that cannot be started at all (here: the exec'd shim's argument is over the kernel's
/// limit for one argument) is logged with its run and project.
#[test]
fn a_run_whose_shim_cannot_start_is_logged_with_its_run_and_project() {
    let huge = "x".repeat(200_000);
    let f = Fleet::new(&format!(
        "[projects.huge]\ncommand = [\"/bin/echo\", \"{huge}\"]\n"
    ));
    let d = f.start_daemon_env(&[("FLEET_FORK_SERVER", "0")]);
    let id = f.enqueue("huge");
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "failed", "{r}");
    let log = wait_logged(&f, &d, id, "run ended");
    let ended = line(&log, id, "run ended");
    assert!(
        has(&ended, "project", "huge") && has(&ended, "status", "failed"),
        "{ended}"
    );
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| has(l, "run", &id.to_string()) && has(l, "project", "huge"))
        .filter(|l| l.contains(" ERROR ") || l.contains(" WARN ") || l.contains(" INFO "))
        .filter(|l| l.contains("spawn failed"))
        .collect();
    assert!(
        !failed.is_empty(),
        "no spawn failure line for run {id}:\n{log}"
    );
}

/// A run that ended while no daemon ran: `fleet check` notes it with plain run ids, and the next
/// daemon logs what recovery found and the run's end, plainly.
#[test]
fn recovery_and_check_print_plain_values() {
    let f = Fleet::with(|dir| format!("[projects.held]\ncommand = {}\n", gated(dir, 0)));
    let mut d = f.start_daemon();
    let id = f.enqueue("held");
    f.wait_status(id, "running");
    stop(&f, &mut d);
    open_gate(&f);
    wait_ended_unrecorded(&f, id);

    let check = f.cmd_ok(&["check"]);
    assert!(check.contains(&format!("run {id} ")), "{check}");
    assert_plain(&check);

    let d2 = f.start_daemon();
    f.wait_status(id, "succeeded");
    let log = wait_logged(&f, &d2, id, "run ended");
    let recovered = line(&log, id, "recovered");
    assert!(has(&recovered, "project", "held"), "{recovered}");
    assert!(has(&recovered, "fate", "ended"), "{recovered}");
    let ended = line(&log, id, "run ended");
    assert!(has(&ended, "status", "succeeded"), "{ended}");
    assert_plain(&log);
}
