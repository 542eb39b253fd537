//! TLS to PostgreSQL at the store's level (that backend alone): a server that refuses every
//! connection without TLS (`hostnossl … reject`), so that a store that opens at all, its pool
//! and its change probe included, speaks TLS; and the certificate checks of each `sslmode`.

use std::time::Duration;

use pgtest::tls::{Ca, ServerTls, Use};
use pgtest::OwnCluster;
use store::*;

use crate::common::new_run;

const BUSY: Duration = Duration::from_secs(5);

/// A cluster whose certificate is for `localhost`, signed by `ca`, that takes TCP connections
/// with TLS only.
fn tls_only(ca: &Ca) -> Option<OwnCluster> {
    let tls = ServerTls {
        server: ca.issue("server", &["localhost"], Use::Server),
        ca: ca.file(),
    };
    OwnCluster::start_tcp(
        Some(&tls),
        &[
            "hostnossl all all 127.0.0.1/32 reject",
            "hostssl all all 127.0.0.1/32 trust",
        ],
    )
}

/// The error opening a store on `url`, as its message. Panics if it opens.
fn refused(url: &str) -> String {
    match Store::open_postgres(url, BUSY) {
        Ok(_) => panic!("opened {url}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_mode_that_encrypts_opens_a_server_that_takes_tls_only() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "ca");
    let Some(pg) = tls_only(&ca) else { return };
    let db = pg.database();
    let root = format!("sslrootcert={}", ca.file().display());
    for params in [
        format!("sslmode=verify-full&{root}"),
        format!("sslmode=verify-ca&{root}"),
        "sslmode=require".to_string(),
        "sslmode=prefer".to_string(),
    ] {
        let url = pg.tcp_url("localhost", &db.name, &params);
        let store = Store::open_postgres(&url, BUSY).unwrap_or_else(|e| panic!("{params}: {e}"));
        // The pool's connections and the change probe's own connection.
        let id = store.enqueue(&new_run("p", "default"), 1).unwrap();
        assert_eq!(store.get_run(id).unwrap().project, "p");
        let mut probe = store
            .change_probe()
            .unwrap_or_else(|e| panic!("{params}: {e}"));
        assert!(probe.changed().unwrap(), "{params}");
    }
    // Plain is refused by the server, with its words.
    let e = refused(&pg.tcp_url("localhost", &db.name, "sslmode=disable"));
    assert!(
        e.contains("no encryption") && e.contains("pg_hba.conf"),
        "{e}"
    );
}

#[test]
fn verify_full_checks_the_name_and_verify_ca_only_the_chain() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "ca");
    let other = Ca::new(pki.path(), "other");
    let Some(pg) = tls_only(&ca) else { return };
    let db = pg.database();
    // 127.0.0.1 is not a name the certificate holds (it has `localhost` only).
    let at_ip = |params: &str| pg.tcp_url("127.0.0.1", &db.name, params);
    let root = format!("sslrootcert={}", ca.file().display());
    let e = refused(&at_ip(&format!("sslmode=verify-full&{root}")));
    assert!(
        e.contains("name mismatch") && e.contains("127.0.0.1"),
        "{e}"
    );
    assert!(e.contains("(it is for localhost)"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    Store::open_postgres(&at_ip(&format!("sslmode=verify-ca&{root}")), BUSY)
        .unwrap_or_else(|e| panic!("verify-ca checks no name: {e}"));
    // libpq's rule: `require` with a root certificate checks the chain, as verify-ca.
    let wrong_root = format!("sslrootcert={}", other.file().display());
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = pg.tcp_url(
            "localhost",
            &db.name,
            &format!("sslmode={mode}&{wrong_root}"),
        );
        let e = refused(&url);
        assert!(e.contains("unknown issuer"), "{mode}: {e}");
    }
}

/// On a unix socket PostgreSQL offers no TLS: a mode that requires it refuses to connect there
/// (never plain), `prefer` connects plain, as docs/OPERATIONS.md says.
#[test]
fn a_mode_that_requires_tls_refuses_a_unix_socket() {
    let Some(db) = pgtest::database() else { return };
    let e = refused(&format!("{} sslmode=require", db.url));
    assert!(e.contains("does not support TLS"), "{e}");
    Store::open_postgres(&format!("{} sslmode=prefer", db.url), BUSY)
        .unwrap_or_else(|e| panic!("prefer: {e}"));
}

/// A certificate refused when a store connects again (the server restarted with another one)
/// is said with its reason, as at the store's open: the pool keeps only the words of its last
/// failure, which must be the reason, not the driver's "error performing TLS handshake".
#[test]
fn a_certificate_refused_on_a_later_connection_is_said_with_its_reason() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "ca");
    let Some(mut pg) = tls_only(&ca) else { return };
    let db = pg.database();
    let url = pg.tcp_url(
        "localhost",
        &db.name,
        &format!("sslmode=verify-full&sslrootcert={}", ca.file().display()),
    );
    let store = Store::open_postgres(&url, BUSY).unwrap();
    let id = store.enqueue(&new_run("p", "default"), 1).unwrap();
    let expired = ca.issue("expired", &["localhost"], Use::ExpiredServer);
    for (from, to) in [(&expired.cert, "server.crt"), (&expired.key, "server.key")] {
        std::fs::copy(from, pg.dir().join(to)).unwrap();
    }
    pg.restart_immediate();
    let e = store
        .get_run(id)
        .expect_err("an expired certificate")
        .to_string();
    assert!(e.contains("has expired"), "{e}");
}
