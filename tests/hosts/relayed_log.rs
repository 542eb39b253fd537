//! A daemon's log API and dashboard show the output of a run another host ran: relayed from
//! that host's listener while the run is active, from the tail the database kept once it has
//! ended, and a one-line 502 naming the host when neither can be read.

use crate::client::{exchange, get, http_address};
use crate::common::*;
use crate::harness::*;

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

#[test]
fn another_hosts_run_log_is_relayed_or_read_from_the_database() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |dir| {
        let gate = shell_quote(&dir.join("go"));
        format!(
            "max_concurrency = 4\n\
             [projects.p]\nhosts = [\"b\"]\ncommand = {}\n\
             [projects.q]\nhosts = [\"b\"]\ncommand = {}\n",
            sh(&format!(
                "echo hello from $FLEET_RUN_ID; while [ ! -e {gate} ]; do sleep 0.05; done; echo bye"
            )),
            sh("echo done-$FLEET_RUN_ID")
        )
    }) else {
        return;
    };
    listen(&h, "a");
    listen(&h, "b");
    let a_daemon = h.start("a");
    let a = http_address(&a_daemon);
    let mut b_daemon = h.start("b");
    let p = h.fleet("a").enqueue("p");
    wait_on_b(&h, p, "running");

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
    // A request another daemon relayed is served from a's own files (none for p), never
    // relayed again: two hosts cannot pass one request back and forth.
    let stream = std::net::TcpStream::connect(&a).unwrap();
    let relayed = exchange(
        stream,
        &format!(
            "GET /api/runs/{p}/log HTTP/1.1\r\nHost: {a}\r\nx-fleet-relayed: 1\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!((relayed.status, relayed.text()), (200, String::new()));
    // The dashboard's run page of a shows it too.
    let page = get(&a, &format!("/runs/{p}"));
    assert!(
        page.status == 200 && page.text().contains(&format!("hello from {p}")),
        "{}",
        page.text()
    );

    // Ended on b: its whole log is the tail the database kept, read without asking b.
    let q = h.fleet("a").enqueue("q");
    h.fleet("a").wait_terminal(q);
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
    drop(a_daemon);
}
