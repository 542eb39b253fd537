//! TLS to PostgreSQL, end to end: a real server with `ssl = on`, a CA and certificates the test
//! makes (pgtest's `tls`), on TCP at 127.0.0.1 with `pg_hba.conf` lines that refuse plain
//! connections where the test says so. Two hosts drain runs over `require` and `verify-full`;
//! `verify-full` refuses a certificate for another name, an expired one and one of an unknown
//! CA, each with its reason and the host; a client certificate that `pg_hba.conf` requires is
//! sent; `sslmode=disable` against a server that wants TLS fails clearly; and `verify-full`
//! (or `require`) never connects without TLS, even to a server that has none.

use std::os::unix::fs::PermissionsExt;

use pgtest::tls::{Ca, Issued, ServerTls, Use};
use pgtest::OwnCluster;

use super::{gated_on_hosts_a_and_b, pg_fleet};
use crate::common::*;

/// TLS or nothing, no client certificate asked for.
const TLS_ONLY: [&str; 2] = [
    "hostnossl all all 127.0.0.1/32 reject",
    "hostssl all all 127.0.0.1/32 trust",
];

/// A project that prints a line.
const HELLO: &str = "[projects.p]\ncommand = [\"echo\", \"hello over TLS\"]\n";

/// A server whose certificate `ca` issued for `names` (expired when `what` says so), with `hba`
/// after the trusted socket line.
fn server(ca: &Ca, names: &[&str], what: Use, hba: &[&str]) -> Option<OwnCluster> {
    let tls = ServerTls {
        server: ca.issue("server", names, what),
        ca: ca.file(),
    };
    OwnCluster::start_tcp(Some(&tls), hba)
}

/// A server that takes TLS only, its certificate for `localhost` issued by `ca` (whose files
/// are in `_pki`), and a new database on it.
struct TlsOnly {
    ca: Ca,
    pg: OwnCluster,
    db: pgtest::Database,
    _pki: tempfile::TempDir,
}

/// A new [`TlsOnly`], or `None` after pgtest's loud skip line.
fn tls_only() -> Option<TlsOnly> {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "ca");
    let pg = server(&ca, &["localhost"], Use::Server, &TLS_ONLY)?;
    let db = pg.database();
    Some(TlsOnly {
        ca,
        pg,
        db,
        _pki: pki,
    })
}

/// `sslmode=verify-full` with `ca`'s certificate as the root.
fn verify_full(ca: &Ca) -> String {
    format!("sslmode=verify-full&sslrootcert={}", ca.file().display())
}

/// A fleet on `url` named `host` with `projects`.
fn host(url: &str, name: &str, projects: &str) -> Fleet {
    let body = format!("host = \"{name}\"\n{projects}");
    pg_fleet(url, move |_| body)
}

/// `fleet enqueue p` on `f`, which must fail (1: the action, not the input) with one line on
/// stderr; returns that line.
fn refused(f: &Fleet) -> String {
    let out = f.cmd(&["enqueue", "p"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "one line: {out:?}");
    lines[0].to_string()
}

/// Starts `f`'s daemon, which must fail to connect at least twice saying `why`, and stay up
/// (it waits, as for a server it cannot reach); runs `meanwhile`, then stops it.
fn kept_out(f: &Fleet, why: &str, meanwhile: impl FnOnce()) {
    let mut d = f.spawn_daemon(&[]);
    f.wait_until(
        DEADLINE,
        &format!("two failed tries saying {why:?}"),
        || d.stderr().matches(why).count() >= 2,
    );
    d.assert_alive();
    meanwhile();
    d.signal(Signal::TERM);
    f.wait_until(DEADLINE, "the daemon to stop", || d.try_exit().is_some());
}

#[test]
fn hosts_on_require_and_verify_full_drain_runs_over_tls_only() {
    let Some(TlsOnly { ca, pg, db, _pki }) = tls_only() else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let go = shared.path().join("go");
    let projects = gated_on_hosts_a_and_b(&go, "");
    let a = host(
        &pg.tcp_url("localhost", &db.name, &verify_full(&ca)),
        "a",
        &projects,
    );
    let b = host(
        &pg.tcp_url("localhost", &db.name, "sslmode=require"),
        "b",
        &projects,
    );
    let mut da = a.start_daemon();
    let mut dbd = b.start_daemon();
    let ids: Vec<i64> = (0..4).map(|i| a.enqueue(&format!("p{i}"))).collect();
    // One at a time on each host: two running at once are one on each.
    a.wait_until(DEADLINE, "a run on each host", || {
        let mut running: Vec<String> = ids
            .iter()
            .map(|id| b.run(*id))
            .filter(|r| r["status"] == "running")
            .map(|r| r["host"].as_str().unwrap_or("").to_string())
            .collect();
        running.sort();
        running == ["a", "b"]
    });
    std::fs::write(&go, "").unwrap();
    for id in &ids {
        let r = a.wait_terminal(*id);
        assert_eq!(status_of(&r), "succeeded", "{r}");
    }
    da.assert_alive();
    dbd.assert_alive();
}

#[test]
fn verify_full_refuses_another_name_an_expired_certificate_and_an_unknown_ca() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "ca");
    let stranger = Ca::new(pki.path(), "stranger");
    for (issuer, names, what, reason) in [
        (
            &ca,
            &["db.elsewhere.example"][..],
            Use::Server,
            "name mismatch",
        ),
        (&ca, &["localhost"][..], Use::ExpiredServer, "expired"),
        (&stranger, &["localhost"][..], Use::Server, "unknown issuer"),
    ] {
        let Some(pg) = server(issuer, names, what, &TLS_ONLY) else {
            return;
        };
        let db = pg.database();
        let url = pg.tcp_url("localhost", &db.name, &verify_full(&ca));
        let f = pg_fleet(&url, |_| HELLO.into());
        let line = refused(&f);
        assert!(line.contains(reason), "{reason}: {line}");
        assert!(line.contains("localhost"), "names the host: {line}");
        // The daemon does not get in either: it waits, as for a server it cannot reach, and
        // says why.
        kept_out(&f, reason, || {});
    }
}

#[test]
fn a_client_certificate_required_by_pg_hba_is_sent_and_accepted() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "ca");
    let Some(pg) = server(
        &ca,
        &["localhost"],
        Use::Server,
        &[
            "hostnossl all all 127.0.0.1/32 reject",
            "hostssl all all 127.0.0.1/32 cert",
        ],
    ) else {
        return;
    };
    let db = pg.database();
    // The client's certificate, for the cluster's role (its common name).
    let client: Issued = ca.issue("client", &["fleet"], Use::Client);
    let with_cert = format!(
        "{}&sslcert={}&sslkey={}",
        verify_full(&ca),
        client.cert.display(),
        client.key.display()
    );
    let f = pg_fleet(&pg.tcp_url("localhost", &db.name, &with_cert), |_| {
        HELLO.into()
    });
    let id = f.enqueue("p");
    let _d = f.start_daemon();
    let r = f.wait_terminal(id);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert!(f.logs(id).contains("hello over TLS"));
    // The published config names the files, and holds nothing of the key.
    let published: String = postgres::Client::connect(&db.url, postgres::NoTls)
        .unwrap()
        .query_one("SELECT text FROM published_config", &[])
        .unwrap()
        .get(0);
    assert!(
        published.contains(&*client.key.to_string_lossy()),
        "{published}"
    );
    let key = std::fs::read_to_string(&client.key).unwrap();
    assert!(!published.contains("PRIVATE KEY"), "{published}");
    assert!(
        !published.contains(key.lines().nth(1).unwrap()),
        "{published}"
    );

    // Without the certificate, the server refuses, in its words.
    let without = pg_fleet(
        &pg.tcp_url("localhost", &db.name, &verify_full(&ca)),
        |_| HELLO.into(),
    );
    let line = refused(&without);
    assert!(line.contains("certificate"), "{line}");
}

#[test]
fn sslmode_disable_against_a_server_that_requires_tls_fails_clearly() {
    let Some(TlsOnly { pg, db, .. }) = tls_only() else {
        return;
    };
    let f = pg_fleet(
        &pg.tcp_url("localhost", &db.name, "sslmode=disable"),
        |_| HELLO.into(),
    );
    let line = refused(&f);
    assert!(line.contains("no encryption"), "{line}");
    assert!(line.contains("pg_hba.conf"), "{line}");
}

#[test]
fn verify_full_and_require_never_connect_without_tls() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "ca");
    // A server with no TLS at all, that lets anyone in over plain TCP.
    let Some(pg) = OwnCluster::start_tcp(None, &["host all all 127.0.0.1/32 trust"]) else {
        return;
    };
    let db = pg.database();
    // The server is there: `prefer` gets in, plain, and queues a run.
    let plain = pg_fleet(&pg.tcp_url("localhost", &db.name, "sslmode=prefer"), |_| {
        HELLO.into()
    });
    let id = plain.enqueue("p");
    for params in [verify_full(&ca), "sslmode=require".to_string()] {
        let f = pg_fleet(&pg.tcp_url("localhost", &db.name, &params), |_| {
            HELLO.into()
        });
        let line = refused(&f);
        assert!(
            line.contains("the server does not support TLS, which this sslmode requires"),
            "{params}: {line}"
        );
        // A daemon that demands TLS never runs the queued run: it keeps trying, and failing.
        kept_out(&f, "does not support TLS", || {
            assert_eq!(status_of(&plain.run(id)), "queued", "{params}");
        });
    }
}

#[test]
fn bad_tls_settings_are_refused_at_load_naming_the_file_or_key() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "ca");
    let client = ca.issue("client", &["fleet"], Use::Client);
    let open_key = pki.path().join("open.key");
    std::fs::copy(&client.key, &open_key).unwrap();
    std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let base = "postgresql://fleet@db.example/jobs";
    let missing = pki.path().join("missing-ca.crt");
    for (params, says) in [
        (
            format!("sslmode=verify-full&sslrootcert={}", missing.display()),
            format!("sslrootcert {}: no such file", missing.display()),
        ),
        (
            "sslmode=very-secure".to_string(),
            "sslmode=very-secure".to_string(),
        ),
        (
            format!(
                "sslmode=require&sslcert={}&sslkey={}",
                client.cert.display(),
                open_key.display()
            ),
            format!(
                "sslkey {}: its group or others may read it",
                open_key.display()
            ),
        ),
    ] {
        let f = pg_fleet(&format!("{base}?{params}"), |_| HELLO.into());
        for args in [&["validate"][..], &["runs"][..]] {
            let out = f.cmd(args);
            assert_eq!(out.code(), Some(2), "{params}: {out:?}");
            let text = format!("{}{}", out.stdout, out.stderr);
            assert!(text.contains(&says), "{params}: {text}");
            assert!(!text.contains("panicked"), "{text}");
        }
    }
}
