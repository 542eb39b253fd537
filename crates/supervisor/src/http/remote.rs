//! The client side of the log API: reading a run's log from the listener of the host that ran
//! it (`GET /api/runs/ID/log?offset=N`). Used by `fleet logs` of another host's run, and by a
//! daemon's own log API and dashboard, which relay another host's run log instead of showing
//! an empty one.
//!
//! Blocking, standard library only, HTTP/1.0 (the server closes the connection after the body,
//! so the body is everything after the head): call it from a blocking thread. Every failure is
//! a sentence for a message, never a panic.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use store::RunId;

/// How long a remote listener gets to connect, and then to answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The request header that marks a request relayed by a daemon for another: the listener that
/// receives it serves its own file and never relays again, so that two hosts that each take a
/// run for the other's cannot pass one request back and forth.
pub const RELAYED: &str = "x-fleet-relayed";

/// An answer of a listener's log API: its body, and the log headers it carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogAnswer {
    /// The log bytes (at most one chunk, cut on character boundaries by the server).
    pub body: Vec<u8>,
    /// `X-Log-Next-Offset`: the position to ask for next (`None`: the header was missing).
    pub next_offset: Option<u64>,
    /// `X-Log-Size`: how much output the command had written in all.
    pub size: Option<u64>,
}

/// The chunk of run `run`'s log at position `offset`, from the listener at `base`
/// (`http://HOST:PORT`, as a host publishes it). `relayed`: the request is a daemon's relay
/// (see [`RELAYED`]).
///
/// Errors, in words: `base` is not an `http://` address, its name does not resolve, no address
/// accepts a connection within [`TIMEOUT`], the answer does not come within [`TIMEOUT`], or it
/// is not a complete HTTP answer with status 200 (the status line is quoted).
pub fn get_log(base: &str, run: RunId, offset: u64, relayed: bool) -> Result<LogAnswer, String> {
    let path = format!("/api/runs/{run}/log?offset={offset}");
    let authority = base
        .strip_prefix("http://")
        .ok_or_else(|| format!("{base} is not an http:// address"))?;
    // A host that listens on every address publishes its name, not an address: resolved
    // here, each address tried in turn.
    let addrs: Vec<std::net::SocketAddr> = authority
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .collect();
    let mut last = format!("{authority}: the name has no address");
    let mut conn = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, TIMEOUT) {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            Err(e) => last = format!("{addr}: {}", said(&e)),
        }
    }
    let mut conn = conn.ok_or(last)?;
    conn.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    let relay = if relayed {
        format!("{RELAYED}: 1\r\n")
    } else {
        String::new()
    };
    // One write: `write!` on the socket itself would send each piece in a packet of its own.
    let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n{relay}\r\n");
    conn.write_all(request.as_bytes()).map_err(|e| said(&e))?;
    let mut reply = Vec::new();
    conn.read_to_end(&mut reply).map_err(|e| said(&e))?;
    let split = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no complete HTTP answer")?;
    let head = String::from_utf8_lossy(&reply[..split]);
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        // The server's one-line reason, when it sent one, says more than the status.
        let reason = String::from_utf8_lossy(&reply[split + 4..]);
        let reason = reason.lines().next().unwrap_or("").trim();
        return Err(if reason.is_empty() {
            format!("it answered {status:?}")
        } else {
            format!("it answered {status:?}: {reason}")
        });
    }
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (key, value) = l.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().parse::<u64>().ok())
                .flatten()
        })
    };
    Ok(LogAnswer {
        next_offset: header("x-log-next-offset"),
        size: header("x-log-size"),
        body: reply[split + 4..].to_vec(),
    })
}

/// An I/O error of the exchange, in words: a timeout says how long was waited.
fn said(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("it did not answer within {} s", TIMEOUT.as_secs())
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::get_log;

    /// Serves one request with `answer`; returns the request as received.
    fn serve_once(answer: &'static [u8]) -> (u16, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            // The whole request, up to its blank line, before answering.
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") {
                assert_eq!(conn.read(&mut byte).unwrap(), 1, "{request:?}");
                request.push(byte[0]);
            }
            conn.write_all(answer).unwrap();
            String::from_utf8_lossy(&request).into_owned()
        });
        (port, server)
    }

    /// A listener published by name (a host that listens on every address publishes
    /// `http://<its host name>:PORT`) is reached by resolving the name; the log headers are
    /// read from the answer.
    #[test]
    fn a_listener_published_by_name_is_resolved_and_read() {
        let (port, server) =
            serve_once(b"HTTP/1.0 200 OK\r\nX-Log-Next-Offset: 5\r\nx-log-size: 9\r\n\r\nhello");
        let answer = get_log(&format!("http://localhost:{port}"), 1, 0, false)
            .expect("the name resolves to the listener");
        assert_eq!(answer.body, b"hello");
        assert_eq!(answer.next_offset, Some(5));
        assert_eq!(answer.size, Some(9));
        let request = server.join().unwrap();
        assert!(
            request.starts_with("GET /api/runs/1/log?offset=0 HTTP/1.0\r\n"),
            "{request}"
        );
        assert!(!request.contains("x-fleet-relayed"), "{request}");
    }

    /// A relay says so, and a refusal carries the server's own reason.
    #[test]
    fn a_relay_is_marked_and_a_refusal_gives_its_reason() {
        let (port, server) = serve_once(b"HTTP/1.0 502 Bad Gateway\r\n\r\nrun 3 ran on host c\n");
        let err = get_log(&format!("http://127.0.0.1:{port}"), 3, 7, true).unwrap_err();
        assert_eq!(
            err,
            "it answered \"HTTP/1.0 502 Bad Gateway\": run 3 ran on host c"
        );
        let request = server.join().unwrap();
        assert!(
            request.starts_with("GET /api/runs/3/log?offset=7 HTTP/1.0\r\n")
                && request.contains("\r\nx-fleet-relayed: 1\r\n"),
            "{request}"
        );
    }
}
