//! A scheduled run in flight when the daemon dies: adopted (or, claimed but never started,
//! requeued) by the next daemon, started once, and its occurrence never fired again.

use serde_json::Value;

use super::arming::*;
use super::notes::*;
use super::runs::*;
use crate::common::time::*;
use crate::common::*;

/// The daemon killed while a scheduled run is in flight, restarted at once (the occurrence is
/// still due by any measure: no starting_deadline): the run is adopted (it ends `succeeded`, its
/// real status, with the same pid) and the occurrence is not fired again.
#[test]
fn killed_with_scheduled_run_in_flight_adopts_it_and_never_fires_it_again() {
    let f = Fleet::new("");
    let (rec, go) = (f.file("rec"), f.file("go"));
    let cmd = gated(&rec, &go);
    let (mut d, o) = arm(&f, &[], "job", &[0], |o| {
        format!(
            "{HEADER}{PROBE}[projects.job]\ncommand = {cmd}\nschedule = \"{}\"\n",
            seconds_expr(o)
        )
    });
    f.wait_until(DEADLINE, "the scheduled run to be running", || {
        runs_of(&f, "job")
            .iter()
            .any(|r| s(r, "status") == "running")
            && !starts(&rec).is_empty()
    });
    let before = runs_of(&f, "job");
    assert_eq!(before.len(), 1, "{}", show(&before));
    let (run, pid) = (id(&before[0]), before[0]["pid"].clone());
    assert_eq!(occ(&before[0]), Some(o[0]));
    d.kill();

    let _d2 = f.start_daemon();
    eval_happened(&f);
    eval_happened(&f);
    let after = runs_of(&f, "job");
    assert_eq!(
        after.len(),
        1,
        "the occurrence was fired again:\n{}",
        show(&after)
    );
    assert_eq!(s(&after[0], "status"), "running", "{}", after[0]);
    assert_eq!(after[0]["pid"], pid, "not the same process: {}", after[0]);

    std::fs::write(&go, "").unwrap();
    let r = f.wait_terminal(run);
    assert_eq!(
        s(&r, "status"),
        "succeeded",
        "the adopted run's real status: {r}"
    );
    let runs = runs_of(&f, "job");
    assert_eq!(runs.len(), 1, "{}", show(&runs));
    let st = starts(&rec);
    assert_eq!(st.len(), 1, "the command started more than once: {st:?}");
    assert_eq!(st[0].occurrence.as_deref(), Some(rfc3339(o[0]).as_str()));
    assert_check_ok(&f);
}

/// The daemon crashes right after claiming a scheduled run (failpoint `daemon-after-claim`,
/// before any shim): the restarted daemon requeues that run and starts it once; the occurrence
/// gets no second run.
#[test]
fn crash_after_claiming_a_scheduled_run_starts_it_once() {
    let f = Fleet::new("");
    let rec = f.file("rec");
    let cmd = sh(&note("start", &rec));
    let (mut d, o) = arm(
        &f,
        &[("FAILPOINTS", "daemon-after-claim=return")],
        "job",
        &[0],
        |o| {
            format!(
                "{HEADER}{PROBE}[projects.job]\ncommand = {cmd}\nschedule = \"{}\"\n",
                seconds_expr(o)
            )
        },
    );
    let mut exit = None;
    f.wait_until(DEADLINE, "the daemon to abort at its first claim", || {
        exit = d.try_exit();
        exit.is_some() || !starts(&rec).is_empty()
    });
    assert!(
        exit.is_some() && starts(&rec).is_empty(),
        "the failpoint did not fire (is {} built with --all-features?): {exit:?}\n{}",
        fleet_bin().display(),
        d.stderr()
    );
    let claimed = runs_of(&f, "job");
    assert_eq!(claimed.len(), 1, "{}", show(&claimed));
    assert_eq!(s(&claimed[0], "status"), "starting", "{}", claimed[0]);
    assert_eq!(occ(&claimed[0]), Some(o[0]));

    let _d2 = f.start_daemon();
    f.wait_until(DEADLINE, "the occurrence's run to succeed", || {
        runs_of(&f, "job")
            .iter()
            .any(|r| s(r, "status") == "succeeded")
    });
    eval_happened(&f);
    let runs = runs_of(&f, "job");
    let for_o: Vec<&Value> = runs.iter().filter(|r| occ(r) == Some(o[0])).collect();
    assert!(
        runs.iter().all(|r| occ(r) == Some(o[0])),
        "another occurrence fired:\n{}",
        show(&runs)
    );
    assert_eq!(
        for_o
            .iter()
            .filter(|r| s(r, "status") != "cancelled")
            .count(),
        1,
        "{}",
        show(&runs)
    );
    let st = starts(&rec);
    assert_eq!(st.len(), 1, "started {} times: {st:?}", st.len());
    assert_eq!(st[0].occurrence.as_deref(), Some(rfc3339(o[0]).as_str()));
    assert_check_ok(&f);
}
