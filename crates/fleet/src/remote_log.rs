//! `fleet logs RUN [--follow]` for a run another host ran: its log lives in that host's
//! `runs/`, so it is read from what the database kept (the tail its daemon stored when the run
//! ended) or, while the run is active, through that host's HTTP listener (`GET
//! /api/runs/ID/log`, chunk after chunk; with `--follow`, polled until the run has ended).
//!
//! It owns the words for every way that can fail (no listener published, listener unreachable)
//! — each names the host and says where the log can be read. It never reads a local file.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use store::{HostRow, Run, Store};

use crate::cli::{Failure, Result};
use crate::console;

/// How long a remote listener gets to connect and to answer.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(5);

/// Prints the log of `run`, which host `host` ran (not this one); with `follow`, goes on
/// printing its output as the run writes it, until the run has ended and everything it wrote
/// is printed.
///
/// The listener serves at most one chunk per request, by position in the command's whole
/// output (a compacted log included): every chunk up to the end is read in turn, so a log
/// longer than a chunk is printed whole.
///
/// Errors: exit 1 when the log cannot be read from here: an active run on a host that serves
/// no `http_listen`, or whose listener cannot be reached or refuses (also in the middle of a
/// `--follow`); the database's errors; the reader of stdout gone.
pub fn print(store: &Store, run: &Run, host: &str, follow: bool) -> Result<()> {
    if run.status.is_terminal() {
        if let Some(t) = store.log_tail(run.id).map_err(Failure::action)? {
            if t.cut {
                console::eprintln(format!(
                    "(tail of the log kept in the database; the full log is on host {})",
                    t.host
                ));
            }
            return console::write_bytes(&t.tail);
        }
    }
    let hosts = store.hosts().map_err(Failure::action)?;
    let addr = hosts
        .iter()
        .find(|h: &&HostRow| h.name == host)
        .and_then(|h| h.http_addr.clone());
    let Some(addr) = addr else {
        return Err(Failure::action(format!(
            "run {} is {} on host {host}, whose log cannot be read from here (it serves no http_listen); run `fleet logs {}` on {host}",
            run.id,
            if run.status.is_terminal() { "ended" } else { "running" },
            run.id
        )));
    };
    let unreadable = |e: String| {
        Failure::action(format!(
            "run {} ran on host {host}, whose listener {addr} cannot be read: {e}; run `fleet logs {}` on {host}",
            run.id, run.id
        ))
    };
    let mut position = 0;
    loop {
        // The status before the log: whatever the run wrote before it ended is then read by
        // the copy that follows.
        let done = !follow
            || store
                .get_run(run.id)
                .map_err(Failure::action)?
                .status
                .is_terminal();
        loop {
            let chunk = http_get(
                &addr,
                &format!("/api/runs/{}/log?offset={position}", run.id),
            )
            .map_err(unreadable)?;
            console::write_bytes(&chunk.body)?;
            let next = chunk.next_offset.ok_or_else(|| {
                unreadable("its answer has no X-Log-Next-Offset header".to_string())
            })?;
            // Caught up: nothing new, or the end of what the log held at that read.
            let caught_up = next <= position || chunk.size.is_some_and(|size| next >= size);
            position = position.max(next);
            if caught_up {
                break;
            }
        }
        if done {
            return Ok(());
        }
        crate::logs::wait_for_more()?;
    }
}

/// An answer of the listener: its body, and the log headers it carried.
struct Answer {
    body: Vec<u8>,
    /// `X-Log-Next-Offset`: the position to ask for next.
    next_offset: Option<u64>,
    /// `X-Log-Size`: how much output there was in all.
    size: Option<u64>,
}

/// An I/O error of the exchange, in words: a timeout says how long was waited.
fn said(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("it did not answer within {} s", REMOTE_TIMEOUT.as_secs())
        }
        _ => e.to_string(),
    }
}

/// The answer to `GET path` on the listener at `base` (`http://IP:PORT`), HTTP/1.0 so that
/// the server closes the connection after the body. Errors: in words, for a message.
fn http_get(base: &str, path: &str) -> std::result::Result<Answer, String> {
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
        match TcpStream::connect_timeout(addr, REMOTE_TIMEOUT) {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            Err(e) => last = format!("{addr}: {}", said(&e)),
        }
    }
    let mut conn = conn.ok_or(last)?;
    conn.set_read_timeout(Some(REMOTE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    // One write: `write!` on the socket itself would send each piece in a packet of its own.
    let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n");
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
        return Err(format!("it answered {status:?}"));
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
    Ok(Answer {
        next_offset: header("x-log-next-offset"),
        size: header("x-log-size"),
        body: reply[split + 4..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::http_get;

    /// A listener published by name (a host that listens on every address publishes
    /// `http://<its host name>:PORT`) is reached by resolving the name; the log headers are
    /// read from the answer.
    #[test]
    fn a_listener_published_by_name_is_resolved_and_read() {
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
            conn.write_all(
                b"HTTP/1.0 200 OK\r\nX-Log-Next-Offset: 5\r\nx-log-size: 9\r\n\r\nhello",
            )
            .unwrap();
            String::from_utf8_lossy(&request).into_owned()
        });
        let answer = http_get(
            &format!("http://localhost:{port}"),
            "/api/runs/1/log?offset=0",
        )
        .expect("the name resolves to the listener");
        assert_eq!(answer.body, b"hello");
        assert_eq!(answer.next_offset, Some(5));
        assert_eq!(answer.size, Some(9));
        let request = server.join().unwrap();
        assert!(
            request.starts_with("GET /api/runs/1/log?offset=0 HTTP/1.0\r\n"),
            "{request}"
        );
    }
}
