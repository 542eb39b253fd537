//! A minimal HTTP/1.1 client for the tests (one GET per connection), and finding the address
//! the daemon bound in its log.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::*;

/// One answer: status code, headers (names lowercased), body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics, showing it, if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Sends `request` (a full request head) on `stream` and reads the answer: its body is
/// `Content-Length` bytes when the header is there (some servers keep the connection open
/// regardless), else everything to the end of the stream.
pub fn exchange(mut stream: impl Read + Write, request: &str) -> Answer {
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let split = loop {
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = stream.read(&mut buf).expect("reading the answer");
        assert!(
            n > 0,
            "no header end in {:?}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    match length {
        Some(len) => {
            while body.len() < len {
                let n = stream.read(&mut buf).expect("reading the body");
                assert!(n > 0, "the body ended early");
                body.extend_from_slice(&buf[..n]);
            }
            body.truncate(len);
        }
        None => {
            stream.read_to_end(&mut body).expect("reading the body");
        }
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// A request head. `host`: the Host header (Chromium's DevTools server wants its own address).
fn request(method: &str, host: &str, path: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// `METHOD path` on `addr` (`127.0.0.1:PORT`).
pub fn call(addr: &str, method: &str, path: &str) -> Answer {
    let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    exchange(stream, &request(method, addr, path))
}

/// `GET path` on `addr`.
pub fn get(addr: &str, path: &str) -> Answer {
    call(addr, "GET", path)
}

/// `GET path` on the unix socket `socket`.
pub fn get_unix(socket: &std::path::Path, path: &str) -> Answer {
    let stream = std::os::unix::net::UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    exchange(stream, &request("GET", "localhost", path))
}

/// The `IP:PORT` the daemon says it serves HTTP on (its log line `serving HTTP …
/// address=http://IP:PORT`), waited for.
pub fn http_address(d: &Daemon<'_>) -> String {
    let mut found = None;
    d.fleet()
        .wait_until(DEADLINE, "the daemon to log its HTTP address", || {
            found = d.stderr().lines().find_map(|l| {
                let at = l.find("address=http://")?;
                Some(
                    l[at + "address=http://".len()..]
                        .split_whitespace()
                        .next()?
                        .to_string(),
                )
            });
            found.is_some()
        });
    found.unwrap()
}
