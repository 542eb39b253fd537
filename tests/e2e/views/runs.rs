//! `fleet runs`: the filters, the table that fits an 80-column terminal without wrapping a row,
//! and the plain tab-separated form for pipes.

use super::on_terminal;
use crate::common::*;

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
            quick_recorder(dir, "rec"),
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

    for columns in [40, 50, 60, 80, 100, 200] {
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
        // The running run shows how long it has run so far (DURATION gives way below 60).
        assert!(
            columns < 60 || (row(slow).contains('…') && row(slow).contains('s')),
            "{table}"
        );
        // Without headers: the same table, minus the header and its rules.
        // (The running run's elapsed time moves between the two: its line is compared by
        // width alone.)
        let bare = table_at(&f, columns, &["--no-headers"]);
        let steady = |l: &&str| {
            if l.contains("running") {
                l.chars().count().to_string()
            } else {
                l.to_string()
            }
        };
        assert_eq!(
            bare.lines().skip(1).map(|l| steady(&l)).collect::<Vec<_>>(),
            lines[3..].iter().map(steady).collect::<Vec<_>>(),
            "--no-headers at {columns} columns:\n{bare}\nwith headers:\n{table}"
        );
        assert!(row(held).contains("paused") || columns < 100, "{table}");
    }
    let wide = table_at(&f, 200, &[]);
    assert!(
        wide.contains("NAMESPACE") && wide.contains("paused (project held)"),
        "{wide}"
    );
    let no_headers = table_at(&f, 80, &["--no-headers"]);
    assert_eq!(no_headers.lines().count(), n_runs + 2, "{no_headers}");
    assert!(!no_headers.contains("STATUS"), "{no_headers}");

    // A real terminal: 40 columns, and one that reports 0×0 (80 assumed, as with a width that
    // cannot be read); a `$COLUMNS` that is not a usable width counts as unset.
    let fits = |out: &str, columns: usize, what: &str| {
        assert_eq!(out.lines().count(), n_runs + 4, "{what}:\n{out}");
        let widest = out.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest <= columns, "{what}: {widest} wide:\n{out}");
        widest
    };
    fits(&on_terminal(&f, 40, None, &["runs"]), 40, "stty cols 40");
    let zero = on_terminal(&f, 0, None, &["runs"]);
    assert!(
        fits(&zero, 80, "0x0") > 60,
        "a 0x0 terminal gets 80 columns:\n{zero}"
    );
    // On that 0×0 terminal, with a `$COLUMNS` that is no width.
    for bad in ["abc", "0", "-5", "99999999999999999999"] {
        let out = on_terminal(&f, 0, Some(bad), &["runs"]);
        let widest = fits(&out, 80, bad);
        assert!(widest > 60, "COLUMNS={bad} gets 80 columns:\n{out}");
    }
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
            quick_recorder(dir, "rec"),
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
    // --limit 0 would print the header alone, which reads as "no runs": a usage error instead.
    for bad in ["0", "-1", "many"] {
        let out = f.cmd(&["runs", "--limit", bad]);
        assert_eq!(out.code(), Some(2), "--limit {bad}: {out:?}");
        assert!(
            out.stderr.contains("--limit"),
            "--limit {bad}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "--limit {bad}: {}", out.stdout);
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

/// Nothing matches: a pipe gets the header line alone (nothing with --no-headers); the table
/// says "no runs match" when filters were given and "no runs" when there are none at all. A
/// window that ends before it starts is exit 2.
#[test]
fn runs_with_nothing_to_show() {
    let f = Fleet::new("[projects.a]\ncommand = [\"true\"]\n");
    assert_eq!(table_at(&f, 80, &[]).trim(), "no runs");
    f.enqueue("a");
    let plain = f.cmd_ok(&["runs", "--status", "failed"]);
    assert_eq!(plain.lines().count(), 1, "{plain}");
    assert!(plain.starts_with("ID\tPROJECT\t"), "{plain}");
    assert_eq!(
        f.cmd_ok(&["runs", "--status", "failed", "--no-headers"]),
        ""
    );
    assert_eq!(
        table_at(&f, 80, &["--status", "failed"]).trim(),
        "no runs match"
    );
    let out = f.cmd(&["runs", "--since", "1h", "--until", "2h"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("--since"), "{}", out.stderr);
}
