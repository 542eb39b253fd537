//! The JSON under `/api/` is what the commands print, logs are reached by run id alone, no
//! endpoint changes anything, a unix socket serves the same, and an address that cannot be
//! bound stops the daemon at start, naming it.

use super::gated;
use crate::common::http_client::{call, get, get_unix, http_address};
use crate::common::*;

#[test]
fn api_runs_is_runs_json_and_logs_are_by_run_id_only() {
    let f = Fleet::with(|dir| {
        format!(
            "http_listen = \"127.0.0.1:0\"\n[namespaces.ops]\nmax_concurrency = 1\n\
             [projects.p]\ncommand = {}\nnamespace = \"ops\"\n\
             [projects.q]\ncommand = {}\nnamespace = \"ops\"\n",
            gated(dir, 0),
            sh("echo queued behind p"),
        )
    });
    let d = f.start_daemon();
    let addr = http_address(&d);
    let p = f.enqueue("p");
    f.wait_status(p, "running");
    let q = f.enqueue("q");

    // Same array as `fleet runs --json`, and the same object for one run.
    assert_eq!(
        get(&addr, "/api/runs?limit=100000").json(),
        serde_json::Value::Array(f.runs())
    );
    assert_eq!(get(&addr, &format!("/api/runs/{q}")).json(), f.run(q));
    let only_q = get(&addr, "/api/runs?project=q").json();
    assert_eq!(only_q.as_array().unwrap().len(), 1);
    assert_eq!(get(&addr, "/api/runs?status=bogus").status, 400);
    // As `fleet runs --limit 0`: refused, not an empty list that reads as "no runs".
    let zero = get(&addr, "/api/runs?limit=0");
    assert_eq!(zero.status, 400);
    assert_eq!(zero.text(), "limit must be at least 1\n");

    // The overview: occupancy at the namespace's cap, the queued run, the active one.
    let o = get(&addr, "/api/overview").json();
    assert_eq!(o["namespaces"]["ops"]["active"], 1);
    assert_eq!(o["namespaces"]["ops"]["max_concurrency"], 1);
    assert_eq!(o["namespaces"]["ops"]["queued"], 1);
    assert_eq!(o["queued"][0]["id"], q);
    assert_eq!(o["active"][0]["id"], p);
    assert_eq!(o["daemon"]["healthy"], true);

    // The page itself, as a browser without JavaScript gets it, shows the same.
    let page = get(&addr, "/").text();
    assert!(
        page.contains("<tr data-namespace=\"ops\" class=\"full\"><td>ops</td><td class=\"occupancy\">1 / 1</td><td>1</td>"),
        "{page}"
    );
    assert!(
        page.contains(&format!("<tr data-run-id=\"{q}\" data-status=\"queued\">")),
        "{page}"
    );

    // The log, followed by offset; it is `fleet logs`.
    f.wait_until(DEADLINE, "p's first line", || {
        f.logs(p).contains("says hello")
    });
    let first = get(&addr, &format!("/api/runs/{p}/log"));
    assert_eq!(first.status, 200);
    let next: u64 = first.header("x-log-next-offset").unwrap().parse().unwrap();
    assert_eq!(next as usize, first.body.len());
    std::fs::write(f.file("GO"), "").unwrap();
    f.wait_status(p, "succeeded");
    let rest = get(&addr, &format!("/api/runs/{p}/log?offset={next}"));
    let whole = format!("{}{}", first.text(), rest.text());
    assert_eq!(whole, f.logs(p));
    assert!(rest.text().contains("done"), "{}", rest.text());
    // Past the end: nothing, and the same offset.
    let end = get(&addr, &format!("/api/runs/{p}/log?offset=999999"));
    assert!(end.body.is_empty());

    // The run's page shows the log without any script.
    let page = get(&addr, &format!("/runs/{p}"));
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains(&format!("run {p} done")),
        "{}",
        page.text()
    );

    // Only run ids reach a log: anything else is refused before any file is named.
    for path in ["/api/runs/999999/log", "/runs/999999", "/api/runs/999999"] {
        assert_eq!(get(&addr, path).status, 404, "{path}");
    }
    for path in [
        "/api/runs/..%2F..%2Ffleet.db/log",
        "/api/runs/../../fleet.toml/log",
        "/api/runs/1%2F..%2F2/log",
        "/runs/-",
        "/assets/..%2Fmod.rs",
    ] {
        let a = get(&addr, path);
        assert!(matches!(a.status, 400 | 404), "{path}: {}", a.status);
        assert!(!a.text().contains("CREATE TABLE"), "{path}");
    }

    // Reads only: every other method is refused, and nothing changed.
    let before = f.runs();
    for path in [
        "/api/runs",
        &format!("/api/runs/{q}"),
        "/metrics",
        "/healthz",
        "/",
    ] {
        for method in ["POST", "PUT", "DELETE", "PATCH"] {
            assert_eq!(call(&addr, method, path).status, 405, "{method} {path}");
        }
    }
    f.wait_status(q, "succeeded");
    let after = f.runs();
    assert_eq!(before.len(), after.len());
}

#[test]
fn a_unix_socket_serves_the_same() {
    let f = Fleet::new(&format!(
        "http_listen = \"./http.sock\"\n[projects.p]\ncommand = {}\n",
        sh("true")
    ));
    let _d = f.start_daemon();
    let socket = f.file("http.sock");
    f.wait_until(DEADLINE, "the HTTP socket", || socket.exists());
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the socket must be the owner's alone");
    f.wait_until(DEADLINE, "/healthz over the socket", || {
        get_unix(&socket, "/healthz").status == 200
    });
    let id = f.enqueue("p");
    f.wait_status(id, "succeeded");
    assert_eq!(
        get_unix(&socket, "/api/runs?limit=100000").json(),
        serde_json::Value::Array(f.runs())
    );
}

#[test]
fn an_address_that_cannot_be_bound_stops_the_daemon_at_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let f = Fleet::new(&format!(
        "http_listen = \"{addr}\"\n[projects.p]\ncommand = {}\n",
        sh("true")
    ));
    let mut d = f.spawn_daemon(&[]);
    f.wait_until(DEADLINE, "the daemon to exit", || d.try_exit().is_some());
    assert_eq!(d.exited().unwrap().code(), Some(1), "{}", d.stderr());
    let err = d.stderr();
    assert!(
        err.contains(&format!("http_listen: cannot listen on http://{addr}")),
        "{err}"
    );
    // It claimed nothing and left no daemon behind.
    assert_eq!(f.status()["daemon"]["running"], false);
    // The address is bound before the takeover: no epoch was taken and no host row made (on
    // a shared database, a host that never ran would stay in `fleet hosts`).
    // (A command that only reads creates no schema: the database may have no tables at all.)
    if let Ok(db) = f.try_db_read_only() {
        let has_hosts: bool = db
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'hosts')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if has_hosts {
            let hosts: i64 = db
                .query_row("SELECT COUNT(*) FROM hosts", [], |r| r.get(0))
                .unwrap();
            assert_eq!(hosts, 0, "a host row was made by a daemon that never ran");
        }
    }

    // A value that is no address is refused by validation, naming the key.
    let bad = Fleet::new("http_listen = \"localhost:9464\"\n");
    let out = bad.cmd(&["validate"]);
    assert_eq!(out.code(), Some(2));
    assert!(out.stderr.contains("http_listen"), "{}", out.stderr);
}

/// A log compacted under `max_log_size` keeps its place in the API: offsets count the
/// command's whole output, so a reader at offset 0 gets the marker for everything dropped and
/// the newest output kept, `X-Log-Size` counts every byte written, and a reader that follows
/// `X-Log-Next-Offset` from before the compaction is told what it missed, not served the file
/// from the wrong place.
#[test]
fn a_compacted_log_keeps_its_place_in_the_api() {
    let f = Fleet::new(&format!(
        "http_listen = \"127.0.0.1:0\"\nmax_log_size = \"1KiB\"\n[projects.p]\ncommand = {}\n",
        // 20 lines of 200 bytes (199 digits and a newline), 4,000 bytes in all.
        sh("for i in $(seq 10 29); do printf '%0199d\\n' $i; done")
    ));
    let d = f.start_daemon();
    let addr = http_address(&d);
    let p = f.enqueue("p");
    f.wait_status(p, "succeeded");
    let whole = get(&addr, &format!("/api/runs/{p}/log"));
    assert_eq!(whole.status, 200);
    let size: u64 = whole.header("x-log-size").unwrap().parse().unwrap();
    assert_eq!(size, 4_000, "every byte the command wrote");
    assert_eq!(whole.header("x-log-next-offset"), Some("4000"));
    assert_eq!(
        whole.text(),
        f.logs(p),
        "offset 0 is what `fleet logs` prints"
    );
    let text = whole.text();
    let (marker, kept) = text.split_once('\n').unwrap();
    let dropped: u64 = marker
        .strip_prefix("--- fleet: ")
        .and_then(|m| m.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no marker line: {marker:?}"));
    assert_eq!(dropped + kept.len() as u64, 4_000, "{text}");
    assert!(kept.ends_with(&format!("{:0199}\n", 29)), "{text}");
    // A reader that was at offset 100 before the compaction missed `dropped - 100` bytes.
    let behind = get(&addr, &format!("/api/runs/{p}/log?offset=100"));
    assert_eq!(
        behind.text(),
        format!(
            "--- fleet: {} bytes dropped here to keep this log under max_log_size ---\n{kept}",
            dropped - 100
        )
    );
    // One inside what is kept gets the output after it, and nothing is repeated.
    let inside = get(&addr, &format!("/api/runs/{p}/log?offset={}", dropped + 10));
    assert_eq!(inside.text(), kept[10..]);
    assert_eq!(inside.header("x-log-next-offset"), Some("4000"));
}

/// An id or a query value that does not parse is a 400 with one line saying so, ended by a
/// newline, on every route that takes one.
#[test]
fn a_bad_id_or_query_is_a_one_line_400() {
    let f = Fleet::new("http_listen = \"127.0.0.1:0\"\n[projects.p]\ncommand = [\"true\"]\n");
    let d = f.start_daemon();
    let addr = http_address(&d);
    let p = f.enqueue("p");
    f.wait_terminal(p);
    for (path, says) in [
        ("/api/runs/abc".to_string(), "bad run id"),
        ("/api/runs/abc/log".to_string(), "bad run id"),
        ("/runs/abc".to_string(), "bad run id"),
        (format!("/api/runs/{p}/log?offset=-1"), "bad query"),
        (format!("/api/runs/{p}/log?offset="), "bad query"),
        ("/api/runs?limit=many".to_string(), "bad query"),
    ] {
        let a = get(&addr, &path);
        let text = a.text();
        assert_eq!(a.status, 400, "{path}: {text}");
        assert!(
            text.starts_with(says) && text.ends_with('\n') && text.lines().count() == 1,
            "{path}: {text:?}"
        );
    }
}
