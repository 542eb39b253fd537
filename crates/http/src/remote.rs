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
use std::time::{Duration, Instant};

use store::RunId;

/// How long one exchange with a remote listener may take in all: connecting, sending the
/// request and reading the whole answer. A listener that answers slowly, byte by byte, is cut
/// off at this deadline, not after this long without a byte.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes an answer may carry, head included: one chunk of log (256 KiB), a marker
/// line and room for the head. Anything larger is not an answer of fleet's log API, and is
/// not read further (it would be held in memory).
pub const MAX_ANSWER: usize = 256 * 1024 + 16 * 1024;

/// The request header that marks a request relayed by a daemon for another: the listener that
/// receives it serves its own file and never relays again, so that two hosts that each take a
/// run for the other's cannot pass one request back and forth.
pub const RELAYED: &str = "x-fleet-relayed";

/// The answer header in which a listener names its host. A reader checks it against the host
/// it meant to ask: a host's published address may be answered by another program, or by
/// another fleet host, once that host's daemon has stopped.
pub const HOST_HEADER: &str = "x-fleet-host";

/// An answer of a listener's log API: its body, and the log headers it carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogAnswer {
    /// The log bytes (at most one chunk, cut on character boundaries by the server).
    pub body: Vec<u8>,
    /// `X-Log-Next-Offset`: the position to ask for next.
    pub next_offset: u64,
    /// `X-Log-Size`: how much output the command had written in all (`None`: not said).
    pub size: Option<u64>,
    /// `X-Log-Source`, when the answer says where its bytes come from (`tail`, `tail-cut`).
    pub source: Option<String>,
}

/// The chunk of run `run`'s log at position `offset`, from the listener of host `host` at
/// `base` (`http://HOST:PORT`, as the host publishes it). `relayed`: the request is a daemon's
/// relay (see [`RELAYED`]).
///
/// Errors, in words: `base` is not an `http://` address, its name does not resolve, nothing
/// accepts a connection, the whole exchange takes longer than [`TIMEOUT`], the answer is not a
/// complete HTTP answer with status 200 (the status line and the server's reason are quoted),
/// is larger than [`MAX_ANSWER`], lacks `X-Log-Next-Offset`, or is not from host `host` (its
/// [`HOST_HEADER`] names another, or none).
pub fn get_log(
    base: &str,
    host: &str,
    run: RunId,
    offset: u64,
    relayed: bool,
) -> Result<LogAnswer, String> {
    let deadline = Instant::now() + TIMEOUT;
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
        let Some(left) = left_until(deadline) else {
            break;
        };
        match TcpStream::connect_timeout(addr, left) {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            Err(e) => last = format!("{addr}: {}", said(&e)),
        }
    }
    let mut conn = conn.ok_or(last)?;
    let relay = if relayed {
        format!("{RELAYED}: 1\r\n")
    } else {
        String::new()
    };
    // One write: `write!` on the socket itself would send each piece in a packet of its own.
    let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n{relay}\r\n");
    conn.set_write_timeout(left_until(deadline).or(Some(Duration::from_millis(1))))
        .map_err(|e| e.to_string())?;
    conn.write_all(request.as_bytes()).map_err(|e| said(&e))?;
    let reply = read_answer(&mut conn, deadline)?;
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
                .then(|| value.trim().to_string())
        })
    };
    match header(HOST_HEADER) {
        Some(h) if h == host => {}
        Some(other) => return Err(format!("it is host {other}'s listener, not host {host}'s")),
        None => return Err("it is not a fleet listener (its answer names no host)".into()),
    }
    let next_offset = header("x-log-next-offset")
        .and_then(|v| v.parse().ok())
        .ok_or("its answer has no X-Log-Next-Offset header")?;
    Ok(LogAnswer {
        next_offset,
        size: header("x-log-size").and_then(|v| v.parse().ok()),
        source: header("x-log-source"),
        body: reply[split + 4..].to_vec(),
    })
}

/// The time left until `deadline`, `None` once it has passed.
fn left_until(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// Everything the server sends until it closes the connection, by `deadline` and at most
/// [`MAX_ANSWER`] bytes.
fn read_answer(conn: &mut TcpStream, deadline: Instant) -> Result<Vec<u8>, String> {
    let late = || format!("it did not answer within {} s", TIMEOUT.as_secs());
    let mut reply = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = left_until(deadline).ok_or_else(late)?;
        conn.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match conn.read(&mut buf) {
            Ok(0) => return Ok(reply),
            Ok(n) => {
                if reply.len() + n > MAX_ANSWER {
                    return Err(format!(
                        "its answer is larger than a log chunk ({MAX_ANSWER} bytes)"
                    ));
                }
                reply.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(said(&e)),
        }
    }
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

    /// Serves one request with `answer`, written in pieces `gap` apart; returns the request as
    /// received.
    fn serve_once(
        answer: Vec<u8>,
        gap: Option<std::time::Duration>,
    ) -> (u16, std::thread::JoinHandle<String>) {
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
            match gap {
                None => {
                    let _ = conn.write_all(&answer);
                }
                Some(gap) => {
                    for b in answer {
                        if conn.write_all(&[b]).is_err() {
                            break;
                        }
                        std::thread::sleep(gap);
                    }
                }
            }
            String::from_utf8_lossy(&request).into_owned()
        });
        (port, server)
    }

    /// A listener published by name (a host that listens on every address publishes
    /// `http://<its host name>:PORT`) is reached by resolving the name; the log headers are
    /// read from the answer.
    #[test]
    fn a_listener_published_by_name_is_resolved_and_read() {
        let (port, server) = serve_once(
            b"HTTP/1.0 200 OK\r\nX-Fleet-Host: b\r\nX-Log-Next-Offset: 5\r\nx-log-size: 9\r\n\r\nhello"
                .to_vec(),
            None,
        );
        let answer = get_log(&format!("http://localhost:{port}"), "b", 1, 0, false)
            .expect("the name resolves to the listener");
        assert_eq!(answer.body, b"hello");
        assert_eq!(answer.next_offset, 5);
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
        let (port, server) = serve_once(
            b"HTTP/1.0 502 Bad Gateway\r\n\r\nrun 3 ran on host c\n".to_vec(),
            None,
        );
        let err = get_log(&format!("http://127.0.0.1:{port}"), "b", 3, 7, true).unwrap_err();
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

    /// What answers at a host's address is checked: another host's listener, or a program
    /// that is no fleet listener at all, is refused, however well-formed its answer.
    #[test]
    fn an_answer_from_another_host_or_program_is_refused() {
        for (answer, expected) in [
            (
                &b"HTTP/1.0 200 OK\r\nX-Fleet-Host: x\r\nX-Log-Next-Offset: 0\r\n\r\n"[..],
                "it is host x's listener, not host a's",
            ),
            (
                &b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<html>hi</html>"[..],
                "it is not a fleet listener (its answer names no host)",
            ),
        ] {
            let (port, server) = serve_once(answer.to_vec(), None);
            let err = get_log(&format!("http://127.0.0.1:{port}"), "a", 1, 0, true).unwrap_err();
            assert_eq!(err, expected);
            server.join().unwrap();
        }
    }

    /// An answer larger than a chunk is not read to its end, and one that trickles in is cut
    /// off at the deadline of the whole exchange, not kept alive by each byte.
    #[test]
    fn a_huge_or_trickling_answer_is_cut_off() {
        let mut huge =
            b"HTTP/1.0 200 OK\r\nX-Fleet-Host: a\r\nX-Log-Next-Offset: 0\r\n\r\n".to_vec();
        huge.resize(super::MAX_ANSWER + 1, b'x');
        let (port, server) = serve_once(huge, None);
        let err = get_log(&format!("http://127.0.0.1:{port}"), "a", 1, 0, true).unwrap_err();
        assert!(
            err.starts_with("its answer is larger than a log chunk"),
            "{err}"
        );
        server.join().unwrap();

        // A byte every 100 ms, for longer than the deadline: each read alone would succeed.
        let slow = vec![b'x'; 80];
        let (port, server) = serve_once(slow, Some(std::time::Duration::from_millis(100)));
        let asked = std::time::Instant::now();
        let err = get_log(&format!("http://127.0.0.1:{port}"), "a", 1, 0, true).unwrap_err();
        assert!(err.contains("did not answer within 5 s"), "{err}");
        assert!(asked.elapsed() < super::TIMEOUT + std::time::Duration::from_secs(2));
        server.join().unwrap();
    }
}
