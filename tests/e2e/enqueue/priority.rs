//! Priorities: higher runs first (equal ones in enqueue order), and the runs table shows a
//! run's priority when it is not the default 0.

use crate::common::*;

#[test]
fn the_runs_table_shows_priorities_and_reruns_and_higher_runs_first() {
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 1\n[projects.p]\ncommand = {}\noverlap = \"queue\"\n",
            sh(&format!(
                "echo $FLEET_RUN_ID >> {}",
                shell_quote(&dir.join("order"))
            ))
        )
    });
    // Queued while no daemon runs, so that the daemon sees them all at once.
    let low = f.enqueue("p");
    let high: i64 = f
        .cmd_ok(&["enqueue", "--priority", "5", "p"])
        .trim()
        .parse()
        .unwrap();
    let negative: i64 = f
        .cmd_ok(&["enqueue", "--priority", "-2", "p"])
        .trim()
        .parse()
        .unwrap();
    let table = f.cmd_ok(&["runs"]);
    let row = |id: i64| {
        table
            .lines()
            .find(|l| first_cell(l) == Some(id.to_string().as_str()))
            .unwrap_or_else(|| panic!("run {id} not in\n{table}"))
            .to_string()
    };
    assert!(row(high).contains("priority 5"), "{table}");
    assert!(row(negative).contains("priority -2"), "{table}");
    assert!(!row(low).contains("priority"), "{table}");

    let _d = f.start_daemon();
    for id in [low, high, negative] {
        f.wait_status(id, "succeeded");
    }
    let order = std::fs::read_to_string(f.file("order")).unwrap();
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        [high, low, negative].map(|i| i.to_string()),
        "higher priority first"
    );
    let again: i64 = f
        .cmd_ok(&["rerun", &low.to_string()])
        .trim()
        .parse()
        .unwrap();
    let table = f.cmd_ok(&["runs"]);
    let line = table
        .lines()
        .find(|l| first_cell(l) == Some(again.to_string().as_str()))
        .unwrap();
    assert!(line.contains(&format!("rerun of {low}")), "{table}");

    // Parts of a note read apart: "priority -2; rerun of N; cancelled by operator".
    let rerun_neg: i64 = f
        .cmd_ok(&["rerun", &negative.to_string()])
        .trim()
        .parse()
        .unwrap();
    f.wait_terminal(rerun_neg);
    // Paused, so that the next rerun stays queued until it is cancelled.
    f.cmd_ok(&["pause", "p"]);
    let held: i64 = f
        .cmd_ok(&["rerun", &rerun_neg.to_string()])
        .trim()
        .parse()
        .unwrap();
    f.cmd_ok(&["cancel", &held.to_string()]);
    let table = f.cmd_ok(&["runs"]);
    let note = |id: i64| {
        table
            .lines()
            .find(|l| first_cell(l) == Some(id.to_string().as_str()))
            .unwrap()
            .rsplit('\t')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        note(rerun_neg),
        format!("priority -2; rerun of {negative}"),
        "{table}"
    );
    assert_eq!(
        note(held),
        format!("priority -2; rerun of {rerun_neg}; cancelled by operator"),
        "{table}"
    );
}
/// The first cell of a line of `fleet runs`: the run id, whether the line is a table row
/// (`│ 12  …`) or, as when stdout is a pipe, tab-separated (`12\t…`).
fn first_cell(line: &str) -> Option<&str> {
    line.trim_start_matches(['│', ' '])
        .split_whitespace()
        .next()
}
