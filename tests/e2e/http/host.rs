//! DNS rebinding: on a loopback address or a unix socket, a request naming another host (as a
//! browser does after a page rebinds its name to 127.0.0.1) is refused with 421; loopback names
//! with any port are served.

use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::common::http_client::{exchange, http_address, Answer};
use crate::common::*;

fn with_host(addr: &str, host: &str, path: &str) -> Answer {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    exchange(
        s,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
}

#[test]
fn a_foreign_host_is_refused_on_loopback_and_on_a_unix_socket() {
    let f = Fleet::new(&format!(
        "http_listen = \"127.0.0.1:0\"\n[projects.p]\ncommand = {}\n",
        sh("echo secret")
    ));
    let d = f.start_daemon();
    let addr = http_address(&d);
    let port = addr.rsplit(':').next().unwrap().to_string();
    let id = f.enqueue("p");
    f.wait_status(id, "succeeded");
    let log = format!("/api/runs/{id}/log");
    for evil in ["evil.example.com", &format!("evil.example.com:{port}")] {
        let a = with_host(&addr, evil, &log);
        assert_eq!(a.status, 421, "{evil}: {}", a.text());
        assert!(!a.text().contains("secret"));
    }
    for good in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "[::1]".to_string(),
    ] {
        let a = with_host(&addr, &good, &log);
        assert_eq!(a.status, 200, "{good}: {}", a.text());
        assert!(a.text().contains("secret"));
    }
    drop(d);

    let f = Fleet::new("http_listen = \"./http.sock\"\n");
    let _d = f.start_daemon();
    let socket = f.file("http.sock");
    f.wait_until(DEADLINE, "the HTTP socket", || {
        UnixStream::connect(&socket).is_ok()
    });
    let s = UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let a = exchange(
        s,
        "GET /healthz HTTP/1.1\r\nHost: evil.example.com\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(a.status, 421, "{}", a.text());
}
