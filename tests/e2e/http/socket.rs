//! A unix socket path for `http_listen` never takes over something that is there: a socket
//! another program answers on, or a file that is not a socket, stops the daemon at start
//! naming the path; a socket nobody answers on (left by a program that is gone) is replaced;
//! a path inside the state directory is refused by validation; a clean stop removes the socket.

use std::os::unix::net::{UnixListener, UnixStream};

use crate::common::http_client::get_unix;
use crate::common::*;

fn config() -> String {
    format!(
        "http_listen = \"unix:http.sock\"\n[projects.p]\ncommand = {}\n",
        sh("true")
    )
}

/// Starts a daemon that must refuse to start, and returns its stderr.
fn refused(f: &Fleet) -> String {
    let mut d = f.spawn_daemon(&[]);
    f.wait_until(DEADLINE, "the daemon to exit", || d.try_exit().is_some());
    assert_eq!(d.exited().unwrap().code(), Some(1), "{}", d.stderr());
    assert_eq!(f.status()["daemon"]["running"], false);
    d.stderr()
}

#[test]
fn a_socket_in_use_or_a_plain_file_is_never_replaced() {
    let f = Fleet::new(&config());
    let socket = f.file("http.sock");
    let other = UnixListener::bind(&socket).unwrap();
    let err = refused(&f);
    assert!(
        err.contains(&format!("cannot listen on unix:{}", socket.display())),
        "{err}"
    );
    // The other program's socket still reaches it.
    UnixStream::connect(&socket).expect("the other program's socket still answers");
    drop(other);

    std::fs::remove_file(&socket).unwrap();
    std::fs::write(&socket, "data").unwrap();
    let err = refused(&f);
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "data");
}

#[test]
fn a_stale_socket_is_replaced_and_a_clean_stop_removes_the_socket() {
    let f = Fleet::new(&config());
    let socket = f.file("http.sock");
    drop(UnixListener::bind(&socket).unwrap()); // the file stays, nobody answers
    let mut d = f.start_daemon();
    f.wait_until(DEADLINE, "/healthz over the socket", || {
        UnixStream::connect(&socket).is_ok() && get_unix(&socket, "/healthz").status == 200
    });
    d.signal(Signal::TERM);
    f.wait_until(DEADLINE, "the daemon to stop", || d.try_exit().is_some());
    assert_eq!(d.exited().unwrap().code(), Some(0), "{}", d.stderr());
    assert!(!socket.exists(), "the HTTP socket is left behind");
}

#[test]
fn a_socket_inside_the_state_directory_is_refused() {
    for value in [
        ".fleet/daemon.sock",
        "unix:.fleet/http.sock",
        "./x/../.fleet/h.sock",
    ] {
        let f = Fleet::new(&format!("http_listen = \"{value}\"\n"));
        let out = f.cmd(&["validate"]);
        assert_eq!(out.code(), Some(2), "{value}: {}", out.stderr);
        assert!(
            out.stderr.contains("http_listen") && out.stderr.contains("state directory"),
            "{value}: {}",
            out.stderr
        );
    }
}
