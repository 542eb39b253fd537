//! The daemon's log shapes: `log_format = "json"` (one JSON object per line), the
//! `--log-format` flag that overrides it, and lines for the journal (no timestamp, a priority
//! prefix) when stderr is the stream `JOURNAL_STREAM` names.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Stdio};

use serde_json::Value;

use crate::common::*;

const PROJECT: &str = "[projects.bad]\ncommand = [\"sh\", \"-c\", \"exit 3\"]\n";

/// Starts `fleet daemon EXTRA…` logging to `<dir>/<name>`, with `env`.
fn daemon(f: &Fleet, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Child {
    let log = std::fs::File::create(f.file(name)).unwrap();
    let mut c = f.command();
    c.arg("daemon")
        .args(extra)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("start fleet daemon")
}

/// Runs `bad` to its end under a daemon started with `extra` and `env`, stops the daemon, and
/// returns its log lines.
fn log_of_one_run(f: &Fleet, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let mut child = daemon(f, name, extra, env);
    let id = f.enqueue("bad");
    f.wait_terminal(id);
    let log = f.file(name);
    f.wait_until(DEADLINE, "the run's end in the log", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("run ended"))
    });
    send_signal(child.id() as i32, Signal::TERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    lines(&log)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let f = Fleet::new(&format!("log_format = \"json\"\n{PROJECT}"));
    let lines = log_of_one_run(&f, "json.log", &[], &[]);
    let objects: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let ended = objects
        .iter()
        .find(|o| o["fields"]["message"] == "run ended")
        .unwrap_or_else(|| panic!("no run ended: {lines:#?}"));
    assert_eq!(ended["level"], "INFO", "{ended}");
    assert_eq!(ended["fields"]["status"], "failed", "{ended}");
    assert_eq!(ended["fields"]["exit_code"], 3, "{ended}");
    assert!(ended["timestamp"].is_string(), "{ended}");

    // The flag wins over the file.
    let text = log_of_one_run(&f, "text.log", &["--log-format", "text"], &[]);
    assert!(text.iter().all(|l| !l.starts_with('{')), "{text:#?}");
    assert!(text.iter().any(|l| l.contains("run ended")), "{text:#?}");
}

/// The shims share the daemon's stderr: their own warnings (here a record that cannot be
/// written, as on a full disk) are JSON objects too.
#[test]
fn shim_warnings_are_json_under_log_format_json() {
    let f = Fleet::new(&format!("log_format = \"json\"\n{PROJECT}"));
    let lines = log_of_one_run(
        &f,
        "json.log",
        &[],
        &[("FAILPOINTS", "shim-started-record-fails=2*return")],
    );
    let objects: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let shim = objects
        .iter()
        .find(|o| {
            o["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("could not write the started record"))
        })
        .unwrap_or_else(|| panic!("no shim warning: {lines:#?}"));
    assert_eq!(shim["level"], "WARN", "{shim}");
    assert!(shim["timestamp"].is_string(), "{shim}");
}

#[test]
fn the_flag_alone_gives_json_and_a_bad_value_is_refused() {
    let f = Fleet::new(PROJECT);
    let lines = log_of_one_run(&f, "json.log", &["--log-format", "json"], &[]);
    for l in &lines {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
    }
    let out = f.cmd(&["daemon", "--log-format", "xml"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    f.write_config(&format!("log_format = \"xml\"\n{PROJECT}"));
    let out = f.cmd(&["validate"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains(":1:") && out.stderr.contains("log_format"),
        "{out:?}"
    );
}

/// With stderr the journal's stream, each line starts with its priority and carries no
/// timestamp; with `JOURNAL_STREAM` naming something else, lines are the usual ones.
#[test]
fn lines_for_the_journal_carry_a_priority_and_no_timestamp() {
    let f = Fleet::new(PROJECT);
    // The daemon's stderr is this file: its identity is what systemd would put in the variable.
    let log = f.file("journal.log");
    std::fs::write(&log, "").unwrap();
    let meta = std::fs::metadata(&log).unwrap();
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let mut child = {
        let file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        let mut c = f.command();
        c.arg("daemon")
            .env("RUST_LOG", "info")
            .env("JOURNAL_STREAM", &stream)
            // A shim's own warning (a record it cannot write) must carry a priority too.
            .env("FAILPOINTS", "shim-started-record-fails=1*return")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        c.spawn().unwrap()
    };
    let id = f.enqueue("bad");
    f.wait_terminal(id);
    f.wait_until(DEADLINE, "the run's end in the log", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("run ended"))
    });
    send_signal(child.id() as i32, Signal::TERM).unwrap();
    assert!(child.wait().unwrap().success());
    let journal = lines(&log);
    assert!(
        journal
            .iter()
            .any(|l| l.starts_with("<4>") && l.contains("could not write the started record")),
        "the shim's warning: {journal:#?}"
    );
    for l in &journal {
        assert!(
            ["<3>", "<4>", "<6>", "<7>"]
                .iter()
                .any(|p| l.starts_with(p)),
            "no priority prefix: {l}"
        );
        // The text format puts its timestamp first: after the prefix comes the level.
        let rest = l[3..].trim_start();
        assert!(
            !rest.starts_with(|c: char| c.is_ascii_digit()),
            "a timestamp: {l}"
        );
    }
    assert!(
        journal
            .iter()
            .any(|l| l.starts_with("<6>") && l.contains("run ended")),
        "{journal:#?}"
    );

    let other = log_of_one_run(&f, "other.log", &[], &[("JOURNAL_STREAM", "1:1")]);
    assert!(
        other.iter().all(|l| !l.starts_with('<')),
        "stderr is not the journal: {other:#?}"
    );
}

/// The log shape is chosen at start: a reload that changes `log_format` says it needs a restart
/// (the lines stay text), instead of silently applying nothing.
#[test]
fn a_reload_changing_log_format_warns() {
    let f = Fleet::new(PROJECT);
    let mut child = daemon(&f, "text.log", &[], &[]);
    let id = f.enqueue("bad");
    f.wait_terminal(id);
    f.replace_config(&format!("log_format = \"json\"\n{PROJECT}"));
    send_signal(child.id() as i32, Signal::HUP).unwrap();
    let log = f.file("text.log");
    f.wait_until(DEADLINE, "the warning about log_format", || {
        std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("log_format: changing it needs a daemon restart"))
    });
    send_signal(child.id() as i32, Signal::TERM).unwrap();
    assert!(child.wait().unwrap().success());
    let text = lines(&log);
    assert!(text.iter().all(|l| !l.starts_with('{')), "{text:#?}");
}
