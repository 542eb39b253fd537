//! The TLS settings read from a connection string, and the files they name.

use super::*;

fn settings(conninfo: &str) -> (String, Settings) {
    split(conninfo).unwrap_or_else(|e| panic!("{conninfo}: {e}"))
}

#[test]
fn the_tls_keys_are_taken_out_of_a_url_and_the_rest_kept() {
    let (rest, s) = settings(
        "postgresql://u:p%26@h:5433/db?connect_timeout=5&sslmode=verify-full&sslrootcert=%2Fca%20dir%2Fca.crt&sslcert=/c.crt&sslkey=/c.key&application_name=x",
    );
    assert_eq!(
        rest,
        "postgresql://u:p%26@h:5433/db?connect_timeout=5&application_name=x"
    );
    assert_eq!(s.mode, Mode::VerifyFull);
    assert_eq!(s.root_cert.as_deref(), Some(Path::new("/ca dir/ca.crt")));
    assert_eq!(s.cert.as_deref(), Some(Path::new("/c.crt")));
    assert_eq!(s.key.as_deref(), Some(Path::new("/c.key")));
    let (rest, s) = settings("postgres://h/db?sslmode=disable");
    assert_eq!((rest.as_str(), s.mode), ("postgres://h/db", Mode::Disable));
    let (rest, s) = settings("postgres://h/db");
    assert_eq!((rest.as_str(), s.mode), ("postgres://h/db", Mode::Prefer));
}

#[test]
fn the_tls_keys_are_taken_out_of_key_value_pairs() {
    let (rest, s) =
        settings("host=h sslmode = require  sslrootcert='/a b/it\\'s.crt' dbname=x user=u");
    assert_eq!(rest, "host=h dbname=x user=u");
    // `require` with a root certificate is `verify-ca`, as libpq has it.
    assert_eq!(s.mode, Mode::VerifyCa);
    assert_eq!(s.root_cert.as_deref(), Some(Path::new("/a b/it's.crt")));
}

#[test]
fn libpq_modes_map_to_the_driver_and_require_never_allows_plain() {
    use postgres::config::SslMode;
    assert_eq!(Mode::Disable.driver(), SslMode::Disable);
    assert_eq!(Mode::Prefer.driver(), SslMode::Prefer);
    for m in [Mode::Require, Mode::VerifyCa, Mode::VerifyFull] {
        assert_eq!(m.driver(), SslMode::Require, "{m:?}");
    }
    assert_eq!(settings("host=h sslmode=require").1.mode, Mode::Require);
    // `sslrootcert=system`: the system's roots, for verify-full only, as libpq 16 reads it.
    let s = settings("host=h sslmode=verify-full sslrootcert=system").1;
    assert_eq!((s.mode, s.root_cert), (Mode::VerifyFull, None));
    assert!(split("host=h sslmode=verify-ca sslrootcert=system").is_err());
}

#[test]
fn bad_tls_settings_are_refused_in_one_line_naming_the_key() {
    for (conninfo, part) in [
        ("postgres://h/db?sslmode=allow", "sslmode=allow"),
        ("host=h sslmode=bogus", "sslmode=bogus"),
        (
            "postgres://h/db?sslcert=/c.crt",
            "`sslcert` is given without `sslkey`",
        ),
        (
            "postgres://h/db?sslkey=/c.key",
            "`sslkey` is given without `sslcert`",
        ),
        // The last of two would win, and a string that reads verify-full connect in plain.
        (
            "postgres://h/db?sslmode=verify-full&sslmode=disable",
            "`sslmode` is given twice",
        ),
        (
            "postgres://h/db?sslmode=verify-full&ssl%6dode=disable",
            "`sslmode` is given twice",
        ),
        (
            "host=h sslrootcert=/a.crt sslrootcert=/b.crt",
            "`sslrootcert` is given twice",
        ),
        // A path from the working directory names another file for a daemon started
        // elsewhere.
        (
            "postgres://h/db?sslrootcert=ca.crt",
            "give an absolute path",
        ),
        // The system's roots are for checking the server's name, and only that (libpq).
        (
            "postgres://h/db?sslmode=require&sslrootcert=system",
            "write sslmode=verify-full",
        ),
        (
            "postgres://h/db?sslmode=prefer&sslrootcert=system",
            "write sslmode=verify-full",
        ),
    ] {
        let e = split(conninfo).unwrap_err();
        assert!(e.contains(part) && !e.contains('\n'), "{conninfo}: {e}");
    }
}

#[test]
fn the_system_roots_check_the_server_s_name() {
    for conninfo in [
        "postgres://h/db?sslrootcert=system",
        "postgres://h/db?sslmode=verify-full&sslrootcert=system",
    ] {
        let s = settings(conninfo).1;
        assert_eq!(
            (s.mode, s.root_cert),
            (Mode::VerifyFull, None),
            "{conninfo}"
        );
    }
}

/// A file that never ends, or whose open waits for a writer, is refused before it is read.
#[test]
fn a_file_that_is_not_a_regular_one_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    for file in [Path::new("/dev/zero"), &fifo] {
        let e = read(file, "sslrootcert").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }
    let big = dir.path().join("big.crt");
    std::fs::write(&big, vec![b'x'; (MOST_BYTES + 1) as usize]).unwrap();
    assert!(read(&big, "sslcert").unwrap_err().contains("larger than"));
}

#[test]
fn an_encrypted_key_is_said_to_be_one() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("c.key");
    std::fs::write(
        &key,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = private_key(&key).unwrap_err();
    assert!(e.contains("encrypted with a passphrase"), "{e}");
}

#[test]
fn missing_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    let s = settings(&format!(
        "host=h sslmode=verify-full sslrootcert={}",
        ca.display()
    ))
    .1;
    let Err(e) = connector(&s) else {
        panic!("connected")
    };
    assert!(
        e.contains("sslrootcert") && e.contains(&*ca.to_string_lossy()),
        "{e}"
    );
    assert!(e.contains("no such file"), "{e}");
    std::fs::write(&ca, "not a certificate\n").unwrap();
    let Err(e) = connector(&s) else {
        panic!("connected")
    };
    assert!(e.contains("holds no PEM certificate"), "{e}");
}

#[test]
fn a_key_its_group_or_others_may_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("c.key");
    std::fs::write(&key, "x").unwrap();
    for (mode, ok) in [(0o600, true), (0o400, true), (0o640, false), (0o604, false)] {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        let r = key_permissions(&key);
        // As root, a file this process made is root's: 0640 is then allowed too.
        let ok = ok || (rustix::process::geteuid().is_root() && mode == 0o640);
        assert_eq!(r.is_ok(), ok, "{mode:o}: {r:?}");
        if let Err(e) = r {
            assert!(e.contains("sslkey") && e.contains("c.key"), "{e}");
        }
    }
    // Owned by another user than root (and than this one): 0600 still, as libpq says.
    if rustix::process::geteuid().is_root() {
        let nobody = rustix::process::Uid::from_raw(65534);
        rustix::fs::chown(&key, Some(nobody), None).unwrap();
        for (mode, ok) in [(0o600, true), (0o640, false)] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(
                key_permissions(&key).is_ok(),
                ok,
                "{mode:o}, owned by 65534"
            );
        }
    }
}
