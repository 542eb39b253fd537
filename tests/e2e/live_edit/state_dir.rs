//! `state_dir` cannot change without a restart, so an edit of it is refused as a whole; and a
//! refused edit stays visible in `fleet status` even when the broken file names `state_dir`.

use serde_json::Value;

use super::reload::*;
use crate::common::*;

/// An edit of `state_dir` is refused as a whole (naming state_dir), the daemon keeps its state
/// directory and config; restoring the file clears the error. `fleet status` is read through a
/// second config file naming the original state directory: with the edited file, `fleet status`
/// looks in the new (empty) directory.
#[test]
fn a_state_dir_edit_is_refused() {
    let f = Fleet::new("max_concurrency = 2\n[projects.p]\ncommand = [\"true\"]\n");
    let mut d = start(&f);
    let probe_status =
        || -> Value { serde_json::from_str(&probe_ok(&f, &["status", "--json"])).unwrap() };
    f.replace_config(
        "state_dir = \"elsewhere\"\nmax_concurrency = 3\n[projects.p]\ncommand = [\"true\"]\n",
    );
    // SIGHUP: `fleet reload` would look for the daemon in the new state directory.
    d.signal(Signal::HUP);
    let mut s = Value::Null;
    f.wait_until(DEADLINE, "the state_dir edit to be refused", || {
        s = probe_status();
        reload_error(&s).is_some()
    });
    let err = reload_error(&s).unwrap();
    assert!(err.contains("state_dir"), "{err}");
    assert_eq!(
        global_cap(&s),
        Some(2),
        "nothing of the edit is applied: {s}"
    );
    assert_eq!(s["daemon"]["pid"], d.pid(), "{s}");
    d.assert_alive();
    edit(
        &f,
        "max_concurrency = 3\n[projects.p]\ncommand = [\"true\"]\n",
    );
    wait_applied(&f, 3, "the restored file to be applied");
    let id = f.enqueue("p");
    assert_all_succeed(&f, &[id]);
    d.assert_alive();
}

/// The rule "the error is shown by `fleet status` until a good edit replaces it" with a broken
/// file that also holds a `state_dir` line: `fleet status` must still find the daemon and show
/// its last reload error.
#[test]
fn status_shows_a_refused_edit_even_when_the_broken_file_names_state_dir() {
    let good = "state_dir = \".fleet\"\nmax_concurrency = 2\n[projects.p]\ncommand = [\"true\"]\n";
    let f = Fleet::new(good);
    let mut d = start(&f);
    // SIGHUP, not `fleet reload`: the reload must reach the daemon whatever the command line can
    // make of the file.
    f.replace_config(
        "state_dir = \".fleet\"\nmax_concurrency = 3\n[projects.p]\ncommand = [\"true\"\n",
    );
    d.signal(Signal::HUP);
    // Proof that the daemon processed the edit, read from the database directly.
    let conn = rusqlite::Connection::open_with_flags(
        f.state_dir().join("fleet.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    f.wait_until(DEADLINE, "the daemon to record the refusal", || {
        conn.query_row(
            "SELECT reload_error FROM hosts ORDER BY epoch DESC LIMIT 1",
            [],
            |r| r.get::<_, Option<String>>(0),
        )
        .unwrap()
        .is_some()
    });
    // Exit 2 is fine (the file is invalid), but the report must be there.
    let out = f.cmd(&["status", "--json"]);
    let s: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!("`fleet status --json` shows nothing of the daemon while fleet.toml is broken ({e}): {out:?}")
    });
    assert_eq!(s["daemon"]["running"], true, "{s}");
    let err = reload_error(&s).unwrap_or_default();
    assert!(err.contains(&format!("{}:4:", f.config.display())), "{s}");
    d.assert_alive();
}
