//! A daemon that has not yet read the newest fleet.toml must never end, skip or refuse anything
//! on the strength of the older one it holds. A command that read the newer file (`fleet
//! enqueue` of a project just added) must find its run waiting, then running — never ended as
//! "project removed" because the daemon's reload had not happened yet. A project the daemon does
//! not know is not a removed project until the daemon has read the file as it is now.

use std::io::Write;

use super::gates::*;
use super::reload::*;
use crate::common::*;

fn config(p: &Paths) -> String {
    format!("[projects.hello]\ncommand = {}\n", quick(p, "hello"))
}

/// Appends a project to fleet.toml in place, the way `cat >> fleet.toml` does.
fn append_project(f: &Fleet, name: &str) {
    let p = Paths::of(f.path());
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&f.config)
        .unwrap();
    write!(file, "[projects.{name}]\ncommand = {}\n", quick(&p, name)).unwrap();
}

/// The fault as a new user meets it: add a project, enqueue it at once. The enqueue's nudge
/// reaches the daemon before its watcher's reload (which waits for the file to settle), and the
/// run must wait for that reload rather than be ended as a removed project's.
#[test]
fn a_project_added_and_enqueued_at_once_waits_then_runs() {
    let f = Fleet::with(|dir| config(&Paths::of(dir)));
    let mut d = start(&f);
    append_project(&f, "hello2");
    let id = f.enqueue("hello2");
    assert_all_succeed(&f, &[id]);
    assert_eq!(f.logs(id), format!("hello2 run {id}\n"));
    d.assert_alive();
    assert_check_ok(&f);
}

/// Without the watcher nothing reloads the file by itself; a queued run of a project the daemon
/// does not know makes it read the file before deciding anything, and the run starts.
#[test]
fn without_the_watcher_a_run_of_an_unknown_project_makes_the_daemon_read_the_file() {
    let f = Fleet::with(|dir| config(&Paths::of(dir)));
    let mut d = f.start_daemon_env(&[("FLEET_WATCH", "0")]);
    reload_round_trip(&f);
    append_project(&f, "hello2");
    let id = f.enqueue("hello2");
    assert_all_succeed(&f, &[id]);
    d.assert_alive();
    assert_check_ok(&f);
}

/// While fleet.toml does not parse, the daemon cannot know which projects the operator means to
/// keep: a queued run of a project missing from the last good config stays queued. Once the file
/// is valid again and still lacks the project, the run is ended as a removed project's.
#[test]
fn while_the_file_is_invalid_no_queued_run_is_ended() {
    let f = Fleet::with(|dir| config(&Paths::of(dir)));
    let p = Paths::of(f.path());
    let mut d = start(&f);
    // A second config on the same state directory names a project fleet.toml does not.
    let other = f.file("other.toml");
    std::fs::write(
        &other,
        format!("[projects.other]\ncommand = {}\n", quick(&p, "other")),
    )
    .unwrap();

    edit(&f, &format!("{}oops = = 1\n", config(&p)));
    wait_status(&f, "the broken edit to be refused", |s| {
        reload_error(s).is_some()
    });
    let mut c = f.command_with_config(&other);
    c.args(["enqueue", "other"]);
    let out = run_with_deadline(c, CMD_DEADLINE);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let id: i64 = out.stdout.trim().parse().unwrap();
    eval_barrier(&f);
    eval_barrier(&f);
    let r = run_any(&f, id);
    assert_eq!(
        status_of(&r),
        "queued",
        "ended while the file could not be read as a config: {r}\n{}",
        f.diagnostics()
    );

    edit(&f, &config(&p));
    let r = wait_terminal_any(&f, id);
    assert_eq!(status_of(&r), "cancelled", "{r}");
    assert_eq!(r["reason"], "project removed", "{r}");
    d.assert_alive();
}
