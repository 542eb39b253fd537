//! The test cluster goes away with the test process that started it: at a normal exit (the exit
//! handler stops the server and deletes its folder) and when the process is killed outright
//! (the parent-death signal stops the server). Each case runs this test binary again as a
//! child (`PGTEST_CHILD` says which part to play), reads the server's pid and folder from it,
//! and looks at them once the child is gone.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child: `exit` (start a cluster, report it, exit) or `hang` (report, then wait to
/// be killed).
const CHILD: &str = "PGTEST_CHILD";

/// True while `pid` is a live process (a zombie, waiting for a reaper, counts as gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
    }
}

/// Polls `gone` until it holds or 30 s have passed.
fn eventually(mut gone: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if gone() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    gone()
}

/// Runs this binary's `child` test with `PGTEST_CHILD=role`; returns the child and the server
/// it reports (pid, folder), or `None` when PostgreSQL is not installed here.
fn start_child(role: &str) -> Option<(std::process::Child, i32, PathBuf)> {
    if !pgtest::available() {
        // The child would skip too; database() says so loudly (or fails, if required).
        assert!(pgtest::database().is_none());
        return None;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, role)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    // Read on a thread that keeps draining the pipe after the report: a child that found its
    // stdout closed would fail on its next line.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            // The test harness may print the test's name on the same line first.
            if let Some(at) = line.find("PGTEST-SERVER ") {
                let rest = &line[at + "PGTEST-SERVER ".len()..];
                if let Some((pid, dir)) = rest.split_once(' ') {
                    let _ = tx.send((pid.parse::<i32>().unwrap(), PathBuf::from(dir)));
                }
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok((pid, dir)) => Some((child, pid, dir)),
        Err(e) => {
            let _ = child.kill();
            panic!("the child reported no server ({e}): {:?}", child.wait());
        }
    }
}

/// The child's part: start a cluster, use it, report it; then exit, or wait to be killed.
#[test]
fn child() {
    let Ok(role) = std::env::var(CHILD) else {
        return;
    };
    let db = pgtest::database().expect("the parent found PostgreSQL");
    let mut c = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    c.batch_execute("CREATE TABLE t (x int)").unwrap();
    let (pid, dir) = pgtest::server().unwrap();
    println!("PGTEST-SERVER {pid} {}", dir.display());
    if role == "hang" {
        loop {
            std::thread::park();
        }
    }
}

/// A test process that ends normally leaves no server and no folder behind.
#[test]
fn the_server_and_its_folder_go_at_exit() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let Some((mut child, pid, dir)) = start_child("exit") else {
        return;
    };
    assert!(child.wait().unwrap().success());
    assert!(!alive(pid), "server {pid} outlived its test process");
    assert!(!dir.exists(), "{} was left behind", dir.display());
}

/// A test process killed outright (as a test runner's timeout does) takes its server along.
#[test]
fn the_server_goes_when_its_process_is_killed() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let Some((mut child, pid, dir)) = start_child("hang") else {
        return;
    };
    assert!(alive(pid));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        eventually(|| !alive(pid)),
        "server {pid} outlived its killed test process"
    );
    // Only the exit handler deletes the folder; a later process sweeps it once it is old.
    let _ = std::fs::remove_dir_all(dir);
}
