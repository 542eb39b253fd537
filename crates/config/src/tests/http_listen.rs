//! `http_listen`: an IP address with a port, or a unix socket path; anything else is refused,
//! naming the key.

use std::path::PathBuf;

use super::path;
use crate::{Config, HttpListen};

fn listen(value: &str) -> Result<Option<HttpListen>, String> {
    Config::parse(&format!("http_listen = {value:?}\n"), path())
        .map(|c| c.http_listen)
        .map_err(|e| e.to_string())
}

#[test]
fn addresses_and_socket_paths_are_accepted() {
    assert_eq!(Config::parse("", path()).unwrap().http_listen, None);
    assert_eq!(
        listen("127.0.0.1:9464").unwrap(),
        Some(HttpListen::Tcp("127.0.0.1:9464".parse().unwrap()))
    );
    assert_eq!(
        listen("[::1]:0").unwrap(),
        Some(HttpListen::Tcp("[::1]:0".parse().unwrap()))
    );
    let dir = Config::parse("", path()).unwrap().dir;
    assert_eq!(
        listen("./http.sock").unwrap(),
        Some(HttpListen::Unix(dir.join("http.sock")))
    );
    assert_eq!(
        listen("/run/fleet/http.sock").unwrap(),
        Some(HttpListen::Unix(PathBuf::from("/run/fleet/http.sock")))
    );
}

#[test]
fn host_names_and_missing_ports_are_refused() {
    for bad in [
        "localhost:9464",
        "127.0.0.1",
        ":9464",
        "",
        "http://127.0.0.1:9464x",
    ] {
        let err = listen(bad).expect_err(bad);
        assert!(err.contains("http_listen"), "{bad}: {err}");
    }
}

#[test]
fn a_unix_prefix_is_a_socket_path_and_the_state_directory_is_refused() {
    let dir = Config::parse("", path()).unwrap().dir;
    assert_eq!(
        listen("unix:http.sock").unwrap(),
        Some(HttpListen::Unix(dir.join("http.sock")))
    );
    for bad in [".fleet/daemon.sock", "unix:.fleet/x.sock", "unix:"] {
        let err = listen(bad).expect_err(bad);
        assert!(err.contains("http_listen"), "{bad}: {err}");
    }
}
