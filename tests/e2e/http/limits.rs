//! The listener cannot be used to take the daemon's file descriptors: it holds a bounded number
//! of connections (one over the cap is accepted and closed at once), and a connection that
//! does not finish its request headers in time — a half-sent request, or one that sends
//! nothing — is closed.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::http_client::{get, http_address};
use crate::common::*;

/// The listener's cap on connections at once (the daemon's `MAX_CONNECTIONS`).
const CAP: usize = 128;

/// How many descriptors the daemon holds now.
fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(usize::MAX)
}

/// Whether the daemon has closed `s` (EOF or a reset), without waiting.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

#[test]
fn connections_beyond_the_cap_hold_no_descriptor_and_runs_still_start() {
    let f = Fleet::new(
        "http_listen = \"127.0.0.1:0\"\n[projects.p]\ncommand = [\"sh\", \"-c\", \"echo hi\"]\n",
    );
    let d = f.start_daemon();
    let addr = http_address(&d);
    f.wait_until(DEADLINE, "/healthz to answer", || {
        get(&addr, "/healthz").status == 200
    });
    let before = fd_count(d.pid());
    let extra = 50;
    let mut conns: Vec<TcpStream> = (0..CAP + extra)
        .map(|_| {
            let s = TcpStream::connect(&addr).expect("connect");
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    // Every connection over the cap is accepted and closed at once.
    f.wait_until(
        DEADLINE,
        "the connections over the cap to be closed",
        || conns.iter_mut().map(closed_by_peer).filter(|c| *c).count() >= extra,
    );
    let held = fd_count(d.pid());
    assert!(
        held <= before + CAP + 8,
        "the daemon holds {held} descriptors with {} connections open (it held {before})",
        CAP + extra
    );
    // The loop still has descriptors to spawn with.
    let id = f.enqueue("p");
    f.wait_status(id, "succeeded");
    drop(conns);
    drop(d);
}

#[test]
fn a_half_sent_request_and_a_silent_connection_are_closed() {
    let f = Fleet::new("http_listen = \"127.0.0.1:0\"\n[projects.p]\ncommand = [\"true\"]\n");
    let d = f.start_daemon();
    let addr = http_address(&d);
    let mut half = TcpStream::connect(&addr).unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        .unwrap();
    let silent = TcpStream::connect(&addr).unwrap();
    for (what, mut s) in [("half-sent request", half), ("silent connection", silent)] {
        // The daemon closes it after 10 s; 40 s is the test's patience, not a timing check.
        s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
        let started = Instant::now();
        let mut rest = Vec::new();
        match s.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the {what} is still open after {:?}", started.elapsed())
            }
            Err(_) => {} // reset: closed too
        }
    }
    drop(d);
}
