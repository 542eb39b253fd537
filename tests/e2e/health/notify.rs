//! The sd_notify protocol, read from a datagram socket the test binds as `NOTIFY_SOCKET`:
//! `READY=1` only once recovery settled what a crash left and the first EVAL ran, `STATUS=` with
//! the counts, `WATCHDOG=1` pings while the loop turns (and none while it does not), and
//! `STOPPING=1` on SIGTERM. Nothing goes to the runs: the variables are the daemon's.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

/// The service manager's end: a datagram socket at `<dir>/notify.sock`.
struct Manager {
    socket: UnixDatagram,
    path: String,
}

/// One datagram, received at an instant.
struct Message {
    at: Instant,
    text: String,
}

impl Manager {
    fn bind(dir: &Path) -> Manager {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        Manager {
            socket,
            path: path.display().to_string(),
        }
    }

    /// Receives until a message containing `line` arrives (returned with all before it), or
    /// panics after [`DEADLINE`].
    fn until(&self, line: &str) -> Vec<Message> {
        let start = Instant::now();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while start.elapsed() < DEADLINE {
            if let Ok(n) = self.socket.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                let done = text.lines().any(|l| l == line);
                seen.push(Message {
                    at: Instant::now(),
                    text,
                });
                if done {
                    return seen;
                }
            }
        }
        let texts: Vec<&str> = seen.iter().map(|m| m.text.as_str()).collect();
        panic!("no {line:?} within {DEADLINE:?}; received: {texts:?}");
    }
}

fn has(messages: &[Message], line: &str) -> bool {
    messages.iter().any(|m| m.text.lines().any(|l| l == line))
}

/// A command that waits for `<dir>/GO` and exits 4; `env` of the service manager's variables it
/// sees go to `<dir>/env-$FLEET_RUN_ID`.
fn held(dir: &Path) -> String {
    sh(&format!(
        "env | grep -E '^(NOTIFY_SOCKET|WATCHDOG_USEC|WATCHDOG_PID|JOURNAL_STREAM)=' \
         > {d}/env-$FLEET_RUN_ID; while [ ! -e {d}/GO ]; do sleep 0.05; done; exit 4",
        d = shell_quote(dir)
    ))
}

/// A run that ended while no daemon ran is settled before `READY=1`; then the pings come, the
/// status line says what is queued, and SIGTERM says `STOPPING=1` before the daemon exits 0.
#[test]
fn ready_after_recovery_then_watchdog_status_and_stopping() {
    let f = Fleet::with(|dir| {
        format!(
            "tick = \"100ms\"\n[projects.held]\ncommand = {}\n[projects.idle]\ncommand = [\"true\"]\n",
            held(dir)
        )
    });
    let mut d1 = f.start_daemon();
    let run = f.enqueue("held");
    f.wait_status(run, "running");
    d1.kill();
    std::fs::write(f.file("GO"), "").unwrap();
    f.wait_until(DEADLINE, "the command's end recorded", || {
        has_record(&f, run, "exit")
    });
    // And its shim gone (it writes the record before it exits): the next daemon must find the
    // run ended, not alive.
    f.wait_until(DEADLINE, "the shim and its command to exit", || {
        marked_pids(&f.marker)
            .into_iter()
            .all(|pid| is_zombie(pid) || process_gone(pid))
    });
    // Queued while no daemon runs, under a project the next daemon starts at once: the status
    // line counts what the database holds.
    let manager = Manager::bind(f.path());
    let d2 = f.spawn_daemon(&[
        ("NOTIFY_SOCKET", &manager.path),
        ("WATCHDOG_USEC", "1000000"),
    ]);
    let before_ready = manager.until("READY=1");
    // Read at once: recovery wrote the run's real end before the daemon said it was ready.
    let r = f.run(run);
    assert_eq!(
        status_of(&r),
        "failed",
        "READY=1 came before recovery settled it: {r}"
    );
    assert_eq!(r["exit_code"], 4, "{r}");
    let ready = before_ready.last().unwrap();
    assert!(
        ready
            .text
            .lines()
            .any(|l| l.starts_with("STATUS=") && l.contains("active") && l.contains("queued")),
        "the status line with READY=1: {:?}",
        ready.text
    );
    // Pings at about half the 1 s timeout while the loop turns.
    let mut pings = 0;
    let since = Instant::now();
    while pings < 4 {
        let m = manager.until("WATCHDOG=1");
        pings += 1;
        assert!(
            m.last().unwrap().at.duration_since(since) < Duration::from_secs(30),
            "pings too slow"
        );
    }
    d2.signal(Signal::TERM);
    let rest = manager.until("STOPPING=1");
    assert!(has(&rest, "STOPPING=1"));
    let mut d2 = d2;
    f.wait_until(DEADLINE, "the daemon to exit on SIGTERM", || {
        d2.try_exit().is_some()
    });
    assert_eq!(
        d2.exited().and_then(|s| s.code()),
        Some(0),
        "{}",
        d2.stderr()
    );
}

/// A loop held inside an EVAL (a failpoint sleeps 3 s in it) stops pinging for that long, though
/// the process is alive: the pings come from the loop's turns, not from a timer of their own.
#[test]
fn a_loop_that_does_not_turn_does_not_ping() {
    let f = Fleet::new("tick = \"100ms\"\n[projects.p]\ncommand = [\"true\"]\n");
    let manager = Manager::bind(f.path());
    // Every EVAL from the second on sleeps 3 s before it writes anything.
    let _d = f.spawn_daemon(&[
        ("NOTIFY_SOCKET", &manager.path),
        ("WATCHDOG_USEC", "400000"),
        ("FAILPOINTS", "daemon-before-finalize=1*off->sleep(3000)"),
    ]);
    manager.until("READY=1");
    // The enqueue makes an EVAL (a nudge), held 3 s; measure the pings around it.
    f.enqueue("p");
    let mut last = Instant::now();
    let mut longest = Duration::ZERO;
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(8) && longest < Duration::from_millis(2500) {
        let m = manager.until("WATCHDOG=1");
        let at = m.last().unwrap().at;
        longest = longest.max(at.duration_since(last));
        last = at;
    }
    assert!(
        longest >= Duration::from_millis(2500),
        "pings went on while the loop was held in its EVAL (longest gap {longest:?})"
    );
}

/// Runs never see the service manager's variables, which are the daemon's alone.
#[test]
fn runs_never_see_the_service_managers_variables() {
    let f = Fleet::with(|dir| format!("[projects.held]\ncommand = {}\n", held(dir)));
    std::fs::write(f.file("GO"), "").unwrap();
    let manager = Manager::bind(f.path());
    let _d = f.start_daemon_env(&[
        ("NOTIFY_SOCKET", &manager.path),
        ("WATCHDOG_USEC", "60000000"),
        ("JOURNAL_STREAM", "8:12345"),
    ]);
    let id = f.enqueue("held");
    f.wait_terminal(id);
    let seen = std::fs::read_to_string(f.file(&format!("env-{id}"))).unwrap();
    assert_eq!(
        seen, "",
        "the run saw the daemon's service variables: {seen}"
    );
}

/// `NOTIFY_SOCKET=@name` names a socket in the abstract namespace (as systemd passes it in
/// containers): the messages reach it.
#[test]
fn an_abstract_notify_socket_is_reached() {
    use std::os::linux::net::SocketAddrExt;
    let f = Fleet::new("tick = \"100ms\"\n[projects.p]\ncommand = [\"true\"]\n");
    // Unique per test run: the abstract namespace is shared by the whole network namespace.
    let name = format!("fleet-notify-test-{}-{}", std::process::id(), now_ns());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let socket = UnixDatagram::bind_addr(&addr).expect("bind the abstract notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let manager = Manager {
        socket,
        path: format!("@{name}"),
    };
    let d = f.spawn_daemon(&[
        ("NOTIFY_SOCKET", &manager.path),
        ("WATCHDOG_USEC", "1000000"),
    ]);
    manager.until("READY=1");
    manager.until("WATCHDOG=1");
    assert!(
        !d.stderr().contains("cannot notify"),
        "no send may have failed:\n{}",
        d.stderr()
    );
}

/// A `NOTIFY_SOCKET` that points nowhere is warned about once, not at every ping; once a message
/// gets through again, the daemon says so.
#[test]
fn an_unreachable_notify_socket_warns_once() {
    let f = Fleet::new("tick = \"100ms\"\n[projects.p]\ncommand = [\"true\"]\n");
    let path = f.path().join("later.sock");
    let path_str = path.display().to_string();
    let d = f.spawn_daemon(&[
        ("NOTIFY_SOCKET", &path_str),
        ("WATCHDOG_USEC", "400000"),
        ("RUST_LOG", "debug"),
    ]);
    let failures = |log: &str| log.lines().filter(|l| l.contains("cannot notify")).count();
    f.wait_until(DEADLINE, "three failed notifications", || {
        failures(&d.stderr()) >= 3
    });
    let log = d.stderr();
    let warned = log
        .lines()
        .filter(|l| l.contains("cannot notify") && l.contains("WARN"))
        .count();
    assert_eq!(warned, 1, "one warning for the whole series:\n{log}");
    // The manager comes (back): the next ping gets through, and the daemon says so.
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let manager = Manager {
        socket,
        path: path_str.clone(),
    };
    manager.until("WATCHDOG=1");
    f.wait_until(
        DEADLINE,
        "the daemon to say it reaches the manager again",
        || d.stderr().contains("reachable again"),
    );
}
