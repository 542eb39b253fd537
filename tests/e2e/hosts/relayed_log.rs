//! A daemon's log API and dashboard show the output of a run another host ran: relayed from
//! that host's listener while the run is active, from the tail the database kept once it has
//! ended, and a one-line 502 naming the host when neither can be read.

use super::harness::*;
use crate::common::http_client::{exchange, get, http_address};
use crate::common::*;

/// Gives host `name` a listener on port 0.
fn listen(h: &Hosts, name: &str) {
    let f = h.fleet(name);
    let text = std::fs::read_to_string(&f.config).unwrap();
    f.write_config(&format!("http_listen = \"127.0.0.1:0\"\n{text}"));
}

/// Waits until run `id` has the status `status` on host `b`.
fn wait_on_b(h: &Hosts, id: i64, status: &str) {
    h.wait_until(DEADLINE, &format!("run {id} {status} on b"), || {
        let r = h.fleet("a").run(id);
        status_of(&r) == status && r["host"].as_str() == Some("b")
    });
}

/// Gives both hosts a listener, starts both daemons and enqueues a run of `p` (placed on
/// `b`), running on b on return: a's daemon, its HTTP address, b's daemon and the run.
fn p_running_on_b(h: &Hosts) -> (Daemon<'_>, String, Daemon<'_>, i64) {
    listen(h, "a");
    listen(h, "b");
    let a_daemon = h.start("a");
    let a = http_address(&a_daemon);
    let b_daemon = h.start("b");
    let p = h.fleet("a").enqueue("p");
    wait_on_b(h, p, "running");
    (a_daemon, a, b_daemon, p)
}

#[test]
fn another_hosts_run_log_is_relayed_or_read_from_the_database() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |dir| {
        let gate = shell_quote(&dir.join("go"));
        format!(
            "max_concurrency = 4\n\
             [projects.p]\nhosts = [\"b\"]\ncommand = {}\n\
             [projects.q]\nhosts = [\"b\"]\ncommand = {}\n\
             [projects.r]\nhosts = [\"nobody\"]\ncommand = [\"true\"]\n",
            sh(&format!(
                "echo hello from $FLEET_RUN_ID; while [ ! -e {gate} ]; do sleep 0.05; done; echo bye"
            )),
            sh("echo done-$FLEET_RUN_ID")
        )
    }) else {
        return;
    };
    let (a_daemon, a, mut b_daemon, p) = p_running_on_b(&h);
    // a's state directory holds files with p's id that are not p's (an install that used
    // SQLite before it joined): the row says which host ran p, not the files.
    let leftover = |id: i64| {
        let runs = h.fleet("a").state_dir().join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        std::fs::write(
            runs.join(format!("{id}.log")),
            "a leftover of another install\n",
        )
        .unwrap();
    };
    leftover(p);

    // Active on b: a's API relays b's listener, positions and all.
    let hello = format!("hello from {p}\n");
    h.wait_until(DEADLINE, "a's API to serve b's running log", || {
        let answer = get(&a, &format!("/api/runs/{p}/log"));
        answer.status == 200 && answer.text() == hello
    });
    let answer = get(&a, &format!("/api/runs/{p}/log?offset=6"));
    assert_eq!(answer.text(), &hello[6..]);
    assert_eq!(
        answer.header("x-log-next-offset"),
        Some(hello.len().to_string().as_str())
    );
    assert_eq!(answer.header("x-log-source"), None);
    // A request another daemon relayed is served from a's own files (here, the leftover),
    // never relayed again: two hosts cannot pass one request back and forth.
    let stream = std::net::TcpStream::connect(&a).unwrap();
    let relayed = exchange(
        stream,
        &format!(
            "GET /api/runs/{p}/log HTTP/1.1\r\nHost: {a}\r\nx-fleet-relayed: 1\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(
        (relayed.status, relayed.text().as_str()),
        (200, "a leftover of another install\n")
    );
    let out = h.fleet("a").cmd(&["logs", &p.to_string()]);
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (Some(0), hello.as_str()),
        "{out:?}"
    );
    // A run no host claimed has no log, whatever files with its id are here.
    let r = h.fleet("a").enqueue("r");
    leftover(r);
    let answer = get(&a, &format!("/api/runs/{r}/log"));
    assert_eq!((answer.status, answer.text()), (200, String::new()));
    let out = h.fleet("a").cmd(&["logs", &r.to_string()]);
    assert_eq!((out.code(), out.stdout.as_str()), (Some(0), ""), "{out:?}");
    // The dashboard's run page of a shows it too.
    let page = get(&a, &format!("/runs/{p}"));
    assert!(
        page.status == 200 && page.text().contains(&format!("hello from {p}")),
        "{}",
        page.text()
    );

    // Ended on b: its whole log is the tail the database kept, read without asking b. (b
    // keeps the tail just after it records the end, not with it.)
    let q = h.fleet("a").enqueue("q");
    h.fleet("a").wait_terminal(q);
    let mut sql = h.sql();
    h.wait_until(
        DEADLINE,
        &format!("the database to keep run {q}'s tail"),
        || {
            sql.query_opt("SELECT 1 FROM run_log_tails WHERE run_id = $1", &[&q])
                .unwrap()
                .is_some()
        },
    );
    let answer = get(&a, &format!("/api/runs/{q}/log"));
    assert_eq!(
        (answer.status, answer.text(), answer.header("x-log-source")),
        (200, format!("done-{q}\n"), Some("tail"))
    );

    // b's daemon stopped with p still running (its shim goes on): nothing can read p's log
    // from a, and a says why, naming b, in one line.
    b_daemon.signal(Signal::TERM);
    h.wait_until(DEADLINE, "b's daemon to stop", || {
        b_daemon.try_exit().is_some()
    });
    let answer = get(&a, &format!("/api/runs/{p}/log"));
    let text = answer.text();
    assert_eq!(answer.status, 502, "{text}");
    assert!(
        text.starts_with(&format!("run {p} ran on host b, ")) && text.lines().count() == 1,
        "{text}"
    );
    let page = get(&a, &format!("/runs/{p}"));
    assert!(
        page.status == 200 && page.text().contains(&format!("run {p} ran on host b, ")),
        "{}",
        page.text()
    );

    // b back: it adopts p, which ends; a serves all of it.
    let _b_daemon = h.start("b");
    std::fs::write(h.shared().join("go"), "").unwrap();
    h.fleet("a").wait_terminal(p);
    let answer = get(&a, &format!("/api/runs/{p}/log"));
    assert_eq!(answer.text(), format!("{hello}bye\n"));
    // `fleet check` on a tells the leftover with p's id for what it is, not p's records.
    let out = h.fleet("a").cmd(&["check"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stdout.contains(&format!(
            "the database says host b ran run {p}, not this host (a)"
        )),
        "{out:?}"
    );
    drop(a_daemon);
}

/// What answers at a host's published address may trickle (another program took the port, a
/// listener wedged mid-answer): each relay gives up at the deadline of its whole exchange, a
/// few run at once and the rest wait their turn as tasks, so the daemon's own work goes on
/// and every request gets its one-line 502 in seconds.
#[test]
fn a_trickling_listener_holds_up_neither_the_daemon_nor_its_api() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |dir| {
        let gate = shell_quote(&dir.join("go"));
        format!(
            "max_concurrency = 4\n\
             [projects.p]\nhosts = [\"b\"]\ncommand = {}\n\
             [projects.q]\nhosts = [\"a\"]\ncommand = [\"true\"]\n",
            sh(&format!("while [ ! -e {gate} ]; do sleep 0.05; done"))
        )
    }) else {
        return;
    };
    let (a_daemon, a, mut b_daemon, p) = p_running_on_b(&h);
    b_daemon.signal(Signal::TERM);
    h.wait_until(DEADLINE, "b's daemon to stop", || {
        b_daemon.try_exit().is_some()
    });

    // b's address now answers with a valid head, then a byte every 200 ms, for a minute.
    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_url = format!("http://{}", fake.local_addr().unwrap());
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    std::thread::spawn(move || {
        for conn in fake.incoming() {
            let Ok(mut conn) = conn else { return };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::spawn(move || {
                use std::io::Write;
                let head = b"HTTP/1.0 200 OK\r\nX-Fleet-Host: b\r\nX-Log-Next-Offset: 5\r\n\r\n";
                if conn.write_all(head).is_err() {
                    return;
                }
                for _ in 0..300 {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    if conn.write_all(b"x").is_err() {
                        return;
                    }
                }
            });
        }
    });
    h.sql()
        .execute(
            "UPDATE hosts SET http_addr = $1 WHERE name = 'b'",
            &[&fake_url],
        )
        .unwrap();

    let asked = std::time::Instant::now();
    let readers: Vec<_> = (0..12)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || {
                let answer = get(&a, &format!("/api/runs/{p}/log"));
                (answer.status, answer.text())
            })
        })
        .collect();
    // Meanwhile a's daemon claims, starts and ends a run of its own.
    let q = h.fleet("a").enqueue("q");
    assert_eq!(status_of(&h.fleet("a").wait_terminal(q)), "succeeded");
    for reader in readers {
        let (status, text) = reader.join().unwrap();
        assert_eq!(status, 502, "{text}");
        assert!(
            text.starts_with(&format!("run {p} ran on host b, ")),
            "{text}"
        );
    }
    eprintln!(
        "12 relays to a trickling listener answered in {:?}",
        asked.elapsed()
    );
    // At most four relays at once, each held to its deadline: the requests past them gave up
    // waiting for a turn rather than each taking a thread of the daemon (12 without the cap).
    let reached = accepted.load(std::sync::atomic::Ordering::SeqCst);
    assert!(reached <= 8, "{reached} connections reached the listener");
    std::fs::write(h.shared().join("go"), "").unwrap();
    drop(a_daemon);
}

/// The dashboard of host a follows a run host b runs, in a real browser: its output as it
/// comes, the reason on the page while b cannot be read (and the follow going on), and the
/// whole log, once, when it ends.
#[test]
fn another_hosts_run_is_followed_on_the_dashboard_in_chromium() {
    use crate::common::cdp::{find_chromium, Browser};
    use_private_bin();
    let Some(chromium) = find_chromium() else {
        let msg = "CHROMIUM IS MISSING: the dashboard's many-hosts browser test did not run. \
                   Install it (`apt-get install chromium`) or point FLEET_CHROMIUM at it.";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{msg}");
        }
        eprintln!("\n*** {msg} ***\n");
        return;
    };
    let Some(h) = Hosts::new(&["a", "b"], |dir| {
        let gate = shell_quote(&dir.join("go"));
        format!(
            "max_concurrency = 4\n[projects.p]\nhosts = [\"b\"]\ncommand = {}\n",
            sh(&format!(
                "echo hello from $FLEET_RUN_ID; while [ ! -e {gate} ]; do sleep 0.05; done; echo bye"
            ))
        )
    }) else {
        return;
    };
    let (_a_daemon, a, mut b_daemon, p) = p_running_on_b(&h);
    let mut browser = Browser::start(&chromium, &h.fleet("a").marker, 1000, 700);
    browser.open(&format!("http://{a}/runs/{p}"));
    browser.wait(
        "b's output on a's page",
        &format!("document.getElementById('log').textContent === 'hello from {p}\\n'"),
    );
    browser.eval("window.fleetTestMark = 1");

    b_daemon.signal(Signal::TERM);
    h.wait_until(DEADLINE, "b's daemon to stop", || {
        b_daemon.try_exit().is_some()
    });
    browser.wait(
        "the reason b cannot be read",
        &format!(
            "document.getElementById('log-note').textContent.startsWith('run {p} ran on host b, ')"
        ),
    );
    let _b_again = h.start("b");
    std::fs::write(h.shared().join("go"), "").unwrap();
    browser.wait(
        "the end of the run, and the reason gone",
        "document.getElementById('run').dataset.status === 'succeeded' && \
         document.getElementById('log').textContent.includes('bye') && \
         document.getElementById('log-note').textContent === ''",
    );
    assert_eq!(
        browser.eval("window.fleetTestMark"),
        1,
        "the page was reloaded"
    );
    assert_eq!(
        browser
            .eval("document.getElementById('log').textContent")
            .as_str()
            .unwrap(),
        format!("hello from {p}\nbye\n"),
        "the page shows the whole log, once"
    );
}
