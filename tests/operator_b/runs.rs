//! `fleet runs`: the filters, the table that fits an 80-column terminal without wrapping a row,
//! and the plain tab-separated form for pipes.

use crate::common::*;
use crate::helpers::*;

/// `fleet runs --table` with `COLUMNS` set (the table a terminal of that width gets).
fn table_at(f: &Fleet, columns: usize, extra: &[&str]) -> String {
    let mut c = f.command();
    c.args(["runs", "--table"]).args(extra);
    c.env("COLUMNS", columns.to_string());
    let out = run_with_deadline(c, CMD_DEADLINE);
    assert_eq!(out.code(), Some(0), "{out:?}");
    out.stdout
}

/// At 80 columns every line of the table is at most 80 characters and each run is one line
/// (borders, header and separator are the only other lines), with long project and namespace
/// names, long notes, a running run's elapsed time and a paused run's note. Wider terminals get
/// more columns.
#[test]
fn the_runs_table_fits_eighty_columns_one_line_per_run() {
    let f = Fleet::with(|dir| {
        format!(
            "[namespaces.a-rather-long-namespace-name]\nmax_concurrency = 2\n\
             [projects.a-project-with-a-very-long-name-indeed]\ncommand = [\"sh\", \"-c\", \"exit 3\"]\n\
             namespace = \"a-rather-long-namespace-name\"\n\
             [projects.held]\ncommand = {}\n\
             [projects.slow]\ncommand = [\"sleep\", \"30\"]\n",
            quick(dir, "rec"),
        )
    });
    let _d = f.start_daemon();
    let failed = f.enqueue("a-project-with-a-very-long-name-indeed");
    f.wait_terminal(failed);
    let slow = f.enqueue("slow");
    f.wait_status(slow, "running");
    let queued = f.enqueue("slow");
    // A long note: cancelled while queued.
    f.cmd_ok(&["cancel", &queued.to_string()]);
    f.cmd_ok(&["pause", "held"]);
    let held = f.enqueue("held");
    let n_runs = f.runs().len();

    for columns in [80, 100, 200] {
        let table = table_at(&f, columns, &[]);
        let lines: Vec<&str> = table.lines().collect();
        for l in &lines {
            assert!(
                l.chars().count() <= columns,
                "a line wider than {columns} columns ({}):\n{table}",
                l.chars().count()
            );
        }
        assert_eq!(
            lines.len(),
            n_runs + 4,
            "a row wrapped at {columns} columns:\n{table}"
        );
        let row = |id: i64| {
            lines
                .iter()
                .find(|l| {
                    l.trim_start_matches(['│', ' '])
                        .starts_with(&format!("{id} "))
                })
                .unwrap_or_else(|| panic!("run {id} not in:\n{table}"))
                .to_string()
        };
        // The running run shows how long it has run so far.
        assert!(
            row(slow).contains('…') && row(slow).contains('s'),
            "{table}"
        );
        assert!(row(held).contains("paused") || columns == 80, "{table}");
    }
    let wide = table_at(&f, 200, &[]);
    assert!(
        wide.contains("NAMESPACE") && wide.contains("paused (project held)"),
        "{wide}"
    );
    let no_headers = table_at(&f, 80, &["--no-headers"]);
    assert_eq!(no_headers.lines().count(), n_runs + 2, "{no_headers}");
    assert!(!no_headers.contains("STATUS"), "{no_headers}");
    f.cmd_ok(&["cancel", &slow.to_string()]);
}

/// The filters: several statuses, namespace, trigger, a time window; names neither in the
/// config nor in the database are exit 2; the plain form has one tab-separated line per run.
#[test]
fn runs_filters_and_the_plain_form() {
    let f = Fleet::with(|dir| {
        format!(
            "[namespaces.ops]\nmax_concurrency = 2\n\
             [projects.a]\ncommand = {}\nnamespace = \"ops\"\n\
             [projects.b]\ncommand = [\"sh\", \"-c\", \"exit 3\"]\n",
            quick(dir, "rec"),
        )
    });
    let before = f.enqueue("b");
    let _d = f.start_daemon();
    let a = f.enqueue("a");
    let b = f.enqueue("b");
    f.wait_terminal(a);
    f.wait_terminal(b);
    f.wait_terminal(before);
    let ids = |args: &[&str]| -> Vec<i64> {
        f.runs_with(args)
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids(&["--status", "succeeded"]), [a]);
    assert_eq!(
        ids(&["--status", "succeeded", "--status", "failed"]),
        [b, a, before]
    );
    assert_eq!(ids(&["--namespace", "ops"]), [a]);
    assert_eq!(
        ids(&["--namespace", "default", "--status", "failed"]),
        [b, before]
    );
    assert_eq!(ids(&["--trigger", "manual"]), [b, a, before]);
    assert!(ids(&["--trigger", "schedule"]).is_empty());
    assert_eq!(ids(&["--since", "1h"]).len(), 3);
    assert!(ids(&["--until", "1h"]).is_empty());
    assert!(ids(&["--since", "2999-01-01T00:00:00Z"]).is_empty());
    assert_eq!(ids(&["--until", "2999-01-01T00:00:00Z"]).len(), 3);

    for bad in [
        &["runs", "--project", "nope"][..],
        &["runs", "--namespace", "nope"],
        &["runs", "--trigger", "cron"],
        &["runs", "--since", "yesterday-ish"],
        &["runs", "--status", "done"],
    ] {
        let out = f.cmd(bad);
        assert_eq!(out.code(), Some(2), "{bad:?}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{bad:?}: {}", out.stderr);
    }

    // Not a terminal: tab-separated, a header, one line per run, nothing cut.
    let plain = f.cmd_ok(&["runs"]);
    let lines: Vec<&str> = plain.lines().collect();
    assert_eq!(lines.len(), 4, "{plain}");
    assert!(
        lines[0].starts_with("ID\tPROJECT\tNAMESPACE\tSTATUS"),
        "{plain}"
    );
    let cols: Vec<&str> = lines[1].split('\t').collect();
    assert_eq!(cols.len(), lines[0].split('\t').count(), "{plain}");
    assert_eq!(cols[0], b.to_string());
    assert_eq!(cols[3], "failed");
    let bare = f.cmd_ok(&["runs", "--no-headers"]);
    assert_eq!(bare.lines().count(), 3, "{bare}");
    assert!(bare.starts_with(&b.to_string()), "{bare}");
}
