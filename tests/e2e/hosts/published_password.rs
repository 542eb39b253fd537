//! The config a host publishes on a shared database never holds the password of its `database`
//! URL (anyone who can read fleet's tables reads the published text), and a host whose file
//! differs from the published one by that password alone is not said to differ: hosts may
//! connect with credentials of their own.

use super::harness::*;
use crate::common::*;

/// The published config's version and text, read from the database.
fn published(h: &Hosts) -> (i64, String) {
    let row = h
        .sql()
        .query_one("SELECT version, text FROM published_config", &[])
        .unwrap_or_else(|e| panic!("read published_config: {e}"));
    (row.get(0), row.get(1))
}

/// `text` (a host's fleet.toml, whose URL has no password) with `password` in its URL.
fn with_password(text: &str, password: &str) -> String {
    let (head, tail) = text
        .split_once("@/")
        .unwrap_or_else(|| panic!("no user@/ in the URL of\n{text}"));
    format!("{head}:{password}@/{tail}")
}

#[test]
fn the_published_config_holds_no_password_and_a_password_alone_differs_nowhere() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |_| {
        "max_concurrency = 2\n[projects.p]\ncommand = [\"true\"]\n".to_string()
    }) else {
        return;
    };
    // The cluster trusts its socket, so any password connects: a's is hunter2; b's file is
    // a's but for the password (and b runs no daemon: its `fleet status` compares its file).
    let (a, b) = (h.fleet("a"), h.fleet("b"));
    let plain = std::fs::read_to_string(&a.config).unwrap();
    a.write_config(&with_password(&plain, "hunter2"));
    b.write_config(&with_password(&plain, "swordfish"));
    let daemon = h.start("a");
    h.wait_until(DEADLINE, "a's config published", || {
        h.sql()
            .query_opt("SELECT 1 FROM published_config", &[])
            .unwrap()
            .is_some()
    });
    let (version, text) = published(&h);
    assert!(
        !text.contains("hunter2"),
        "the password is published:\n{text}"
    );
    assert!(
        text.contains(":********@/"),
        "the password is not masked where it was:\n{text}"
    );
    // The same file, and a file with another password: neither differs.
    assert_eq!(
        a.status()["local_config_differs"].as_bool(),
        Some(false),
        "{}",
        h.diagnostics()
    );
    assert_eq!(b.status()["local_config_differs"].as_bool(), Some(false));
    h.wait_until(DEADLINE, "a's heartbeat to report its file", || {
        h.host_row("a", "a")
            .is_some_and(|r| r["config_differs"].as_bool() == Some(false))
    });
    // a's operator changes the password alone and reloads: nothing new is published.
    let said = |d: &Daemon| d.stderr().matches("the config is published").count();
    let before = said(&daemon);
    a.replace_config(&with_password(&plain, "correct-horse"));
    a.cmd_ok(&["reload"]);
    h.wait_until(DEADLINE, "a's daemon to look at its edited file", || {
        said(&daemon) > before
    });
    let (now, text) = published(&h);
    assert_eq!(now, version, "a password change was published:\n{text}");
    assert!(
        !text.contains("correct-horse") && !text.contains("hunter2"),
        "{text}"
    );
    assert_eq!(a.status()["local_config_differs"].as_bool(), Some(false));
    // Any other difference still differs.
    b.write_config(&format!(
        "{}# b's own\n",
        with_password(&plain, "swordfish")
    ));
    assert_eq!(b.status()["local_config_differs"].as_bool(), Some(true));
}
