//! `fleet runs` (the table) shows the trigger and, for a scheduled run, its occurrence.

use super::arming::*;
use super::runs::*;
use crate::common::*;

/// `fleet runs` (the table) shows the trigger and, in the NOTE column, the occurrence of a
/// scheduled run; a manual run shows `manual` and no occurrence.
#[test]
fn runs_table_shows_trigger_and_occurrence() {
    let f = Fleet::new(&format!(
        "{HEADER}[projects.job]\ncommand = [\"true\"]\nschedule = \"*/1 * * * * *\"\n\
         [projects.hand]\ncommand = [\"true\"]\n"
    ));
    let _d = f.start_daemon();
    let manual = f.enqueue("hand");
    f.wait_status(manual, "succeeded");
    f.wait_until(DEADLINE, "a scheduled run to succeed", || {
        runs_of(&f, "job")
            .iter()
            .any(|r| s(r, "status") == "succeeded")
    });
    let r = runs_of(&f, "job")
        .into_iter()
        .find(|r| s(r, "status") == "succeeded")
        .unwrap();
    let table = f.cmd_ok(&["runs"]);
    let line = |run: i64| {
        table
            .lines()
            .find(|l| {
                l.trim_start_matches(|c: char| c == '│' || c.is_whitespace())
                    .split_whitespace()
                    .next()
                    == Some(run.to_string().as_str())
            })
            .unwrap_or_else(|| panic!("run {run} not in the table:\n{table}"))
            .to_string()
    };
    let sched = line(id(&r));
    assert!(
        sched.contains("schedule")
            && sched.contains(&format!("occurrence {}", s(&r, "occurrence"))),
        "the scheduled run's row lacks its trigger or occurrence:\n{sched}\n{table}"
    );
    let hand = line(manual);
    assert!(
        hand.contains("manual") && !hand.contains("occurrence"),
        "the manual run's row:\n{hand}\n{table}"
    );
    assert!(
        table.contains("TRIGGER") && table.contains("NOTE"),
        "{table}"
    );
}
