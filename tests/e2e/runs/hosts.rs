//! One host on SQLite: its own capacity (`[hosts.NAME] max_concurrency`) is one more cap, a
//! project placed on another host never runs here, and `fleet validate` says both when it
//! matters.

use std::time::Duration;

use crate::common::*;

const HOST_CAP: usize = 2;
const GLOBAL: usize = 6;
const PROJECTS: usize = 6;

#[test]
fn the_host_capacity_binds_under_a_larger_global_cap_and_placement_holds() {
    let f = Fleet::with(|dir| {
        let cmd = sh(&recorder_script(&dir.join("records"), "0.3"));
        let mut t = format!(
            "max_concurrency = {GLOBAL}\nhost = \"here\"\n\
             [hosts.here]\nmax_concurrency = {HOST_CAP}\n"
        );
        for i in 0..PROJECTS {
            t += &format!("[projects.p{i}]\ncommand = {cmd}\nhosts = [\"here\", \"there\"]\n");
        }
        t += &format!("[projects.away]\ncommand = {cmd}\nhosts = [\"there\"]\n");
        t
    });
    let away = f.enqueue("away");
    let mut ids = Vec::new();
    for i in 0..2 * PROJECTS {
        ids.push(f.enqueue(&format!("p{}", i % PROJECTS)));
    }
    let _d = f.start_daemon();
    f.wait_until(Duration::from_secs(90), "the placed runs to end", || {
        let runs = f.runs();
        let ended = runs.iter().filter(|r| is_terminal(r)).count();
        ended == ids.len()
    });
    for id in &ids {
        assert_eq!(status_of(&f.run(*id)), "succeeded");
    }
    // Queued first, yet never started: it is placed on another host only.
    assert_eq!(status_of(&f.run(away)), "queued", "{}", f.run(away));
    let records = read_records(&f.file("records"));
    assert!(
        records.iter().all(|r| r.project != "away"),
        "a project placed elsewhere ran here: {records:#?}"
    );
    assert_eq!(records.len(), 4 * PROJECTS, "one start and one end per run");
    let overlap = max_overlap(&records);
    assert!(
        overlap.global <= HOST_CAP,
        "host capacity {HOST_CAP} exceeded: {overlap:?}"
    );
    // The host cap must bind, or this test could not catch it being exceeded.
    assert_eq!(overlap.global, HOST_CAP, "{overlap:?}");
}

#[test]
fn validate_warns_about_undeclared_hosts_and_projects_that_never_run_here() {
    let f = Fleet::new(
        "host = \"here\"\n\
         [hosts.here]\nmax_concurrency = 1\n\
         [projects.a]\ncommand = [\"true\"]\nhosts = [\"here\", \"tpyo\"]\n\
         [projects.b]\ncommand = [\"true\"]\nhosts = [\"tpyo\"]\n\
         [projects.c]\ncommand = [\"true\"]\n",
    );
    let out = f.cmd(&["validate"]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let file = f.config.display().to_string();
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stderr);
    assert!(
        lines[0].starts_with(&format!("warning: {file}: projects.a.hosts: host \"tpyo\""))
            && lines[0].contains("(placed there: a, b)"),
        "{}",
        out.stderr
    );
    assert!(
        lines[1].starts_with(&format!(
            "warning: {file}: projects.b.hosts: placed only on tpyo"
        )) && lines[1].contains("never start"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.contains("2 warnings"), "{}", out.stdout);
}

#[test]
fn bad_host_names_are_refused_naming_the_key_or_flag() {
    let f = Fleet::new("host = \"a b\"\n[projects.p]\ncommand = [\"true\"]\nhosts = []\n");
    let out = f.cmd(&["validate"]);
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    let file = f.config.display().to_string();
    assert!(
        out.stderr
            .contains(&format!("{file}:1: host: invalid host name \"a b\"")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains(&format!("{file}:4: projects.p.hosts: must not be empty")),
        "{}",
        out.stderr
    );
    let g = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    let out = g.cmd(&["daemon", "--host", "no/slash"]);
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("--host") && out.stderr.contains("invalid host name"),
        "{}",
        out.stderr
    );
}

/// `fleet daemon --host` wins over the file's `host`, and a daemon keeps its name across a
/// reload that changes `host`: what is placed on it keeps running there, and what is placed on
/// the file's name never does.
#[test]
fn the_host_flag_wins_and_the_name_survives_a_reload() {
    let config = |host: &str| {
        format!(
            "host = \"{host}\"\n\
             [projects.mine]\ncommand = [\"true\"]\nhosts = [\"flagged\"]\n\
             [projects.theirs]\ncommand = [\"true\"]\nhosts = [\"{host}\"]\n"
        )
    };
    let f = Fleet::new(&config("written"));
    let log = f.file("flagged.stderr");
    let out = std::fs::File::create(&log).unwrap();
    let mut c = f.command();
    c.args(["daemon", "--host", "flagged"])
        .env("RUST_LOG", "info")
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    let mut child = c.spawn().expect("fleet daemon");
    let theirs = f.enqueue("theirs");
    let first = f.enqueue("mine");
    f.wait_status(first, "succeeded");
    f.replace_config(&config("renamed"));
    f.cmd_ok(&["reload"]);
    let second = f.enqueue("mine");
    f.wait_status(second, "succeeded");
    assert_eq!(status_of(&f.run(theirs)), "queued", "{}", f.run(theirs));
    let pid = child.id() as i32;
    send_signal(pid, Signal::TERM).unwrap();
    let st = child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(st.success(), "{st}: {text}");
    // The name came from the flag: the file's edit of `host` is no news to this daemon.
    assert!(!text.contains("host: changing it"), "{text}");
}

/// Without the flag, a reload that changes `host` is refused for the name alone (a restart
/// takes it), with a warning; the daemon keeps placing by the name it started with.
#[test]
fn a_reload_that_renames_the_host_warns_and_keeps_the_name() {
    let config = |host: &str| {
        format!(
            "host = \"{host}\"\nmax_concurrency = 3\n\
             [projects.mine]\ncommand = [\"true\"]\nhosts = [\"first\"]\n"
        )
    };
    let f = Fleet::new(&config("first"));
    let d = f.start_daemon();
    f.replace_config(&config("second"));
    f.cmd_ok(&["reload"]);
    f.wait_until(DEADLINE, "the warning about the renamed host", || {
        d.stderr()
            .contains("host: changing it needs a daemon restart")
    });
    let id = f.enqueue("mine");
    f.wait_status(id, "succeeded");
}
