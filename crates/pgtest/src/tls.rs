//! Tests only: a cluster of a test's own that listens on TCP (127.0.0.1, a free port), with TLS
//! when asked and the `pg_hba.conf` lines the test gives; and a throwaway certificate authority
//! ([`Ca`]) to issue its certificates and clients' ones.
//!
//! The server's files (certificate, key, CA) are copied into the cluster's folder and handed to
//! the server's account, as PostgreSQL wants its key: owned by the account that runs it and
//! readable by nobody else. Connections over the unix socket stay trusted (`local all all
//! trust`), so the test's own set-up (creating databases) needs no TLS.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

use crate::{Cluster, OwnCluster, ROLE};

/// A throwaway certificate authority, its certificate written to a file (for `sslrootcert`
/// and the server's `ssl_ca_file`).
pub struct Ca {
    dir: PathBuf,
    name: String,
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate and its key, as files (the key 0600).
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What a certificate [`Ca::issue`] makes is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// A server, for `names` (DNS names or IP addresses), valid now.
    Server,
    /// A server, for `names`, that expired long ago.
    ExpiredServer,
    /// A client, whose common name is its first name (a role).
    Client,
}

impl Ca {
    /// A new CA named `name`, whose files go in `dir` (`<name>.crt`).
    pub fn new(dir: &Path, name: &str) -> Ca {
        let key = KeyPair::generate().expect("generate a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("fleet test CA {name}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("self-sign the CA");
        let ca = Ca {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            cert,
            key,
        };
        write(&ca.file(), ca.cert.pem().as_bytes(), 0o644);
        ca
    }

    /// The CA's certificate file.
    pub fn file(&self) -> PathBuf {
        self.dir.join(format!("{}.crt", self.name))
    }

    /// A certificate for `names` signed by this CA, written as `<stem>.crt` and `<stem>.key`
    /// (mode 0600) in the CA's folder.
    pub fn issue(&self, stem: &str, names: &[&str], what: Use) -> Issued {
        let key = KeyPair::generate().expect("generate a key");
        let sans: Vec<String> = match what {
            Use::Client => Vec::new(),
            Use::Server | Use::ExpiredServer => names.iter().map(|n| n.to_string()).collect(),
        };
        let mut params = CertificateParams::new(sans).expect("certificate params");
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or(stem));
        params.extended_key_usages = vec![match what {
            Use::Client => ExtendedKeyUsagePurpose::ClientAuth,
            Use::Server | Use::ExpiredServer => ExtendedKeyUsagePurpose::ServerAuth,
        }];
        if what == Use::ExpiredServer {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("sign the certificate");
        let issued = Issued {
            cert: self.dir.join(format!("{stem}.crt")),
            key: self.dir.join(format!("{stem}.key")),
        };
        write(&issued.cert, cert.pem().as_bytes(), 0o644);
        write(&issued.key, key.serialize_pem().as_bytes(), 0o600);
        issued
    }
}

/// Writes `bytes` to `path` with `mode`. Panics on failure.
fn write(path: &Path, bytes: &[u8], mode: u32) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// The server's TLS: its certificate and key, and the CA its clients' certificates must chain
/// to.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub server: Issued,
    pub ca: PathBuf,
}

/// A free TCP port on 127.0.0.1 (the kernel's pick; released for the server to take).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("a free port: {e}"))
}

impl OwnCluster {
    /// A cluster of the test's own listening on 127.0.0.1 at a free port, with `ssl = on` and
    /// `tls`'s files when given (`ssl = off` otherwise), and a `pg_hba.conf` of `hba`'s lines
    /// after `local all all trust`. `None` (after the loud `SKIPPED` line) when PostgreSQL is
    /// not installed here.
    ///
    /// Panics: as [`OwnCluster::start`].
    pub fn start_tcp(tls: Option<&ServerTls>, hba: &[&str]) -> Option<OwnCluster> {
        OwnCluster::start_configured(|dir| {
            let port = free_port()?;
            let hba_file = dir.join("pg_hba.conf");
            let mut lines = vec!["local all all trust"];
            lines.extend_from_slice(hba);
            std::fs::write(&hba_file, lines.join("\n") + "\n")
                .map_err(|e| format!("write pg_hba.conf: {e}"))?;
            let mut settings = vec![
                "listen_addresses=127.0.0.1".to_string(),
                format!("hba_file={}", hba_file.display()),
            ];
            match tls {
                None => settings.push("ssl=off".into()),
                Some(tls) => {
                    let copy = |from: &Path, name: &str, mode: u32| {
                        let to = dir.join(name);
                        std::fs::copy(from, &to)
                            .and_then(|_| {
                                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))
                            })
                            .map_err(|e| format!("copy {}: {e}", from.display()))?;
                        Ok::<_, String>(to)
                    };
                    let cert = copy(&tls.server.cert, "server.crt", 0o644)?;
                    let key = copy(&tls.server.key, "server.key", 0o600)?;
                    let ca = copy(&tls.ca, "ca.crt", 0o644)?;
                    settings.push("ssl=on".into());
                    settings.push(format!("ssl_cert_file={}", cert.display()));
                    settings.push(format!("ssl_key_file={}", key.display()));
                    settings.push(format!("ssl_ca_file={}", ca.display()));
                }
            }
            Ok((port, settings))
        })
    }

    /// The TCP port the server listens on (meaningful for [`OwnCluster::start_tcp`]'s).
    pub fn port(&self) -> u16 {
        self.cluster.port
    }

    /// A `postgresql://` URL of database `name` over TCP at `host` (which must resolve to
    /// 127.0.0.1), as the cluster's role, with `params` (`key=value&…`) appended.
    pub fn tcp_url(&self, host: &str, name: &str, params: &str) -> String {
        let cluster: &Cluster = &self.cluster;
        let sep = if params.is_empty() { "" } else { "&" };
        format!(
            "postgresql://{ROLE}@{host}:{}/{name}?connect_timeout=10{sep}{params}",
            cluster.port
        )
    }
}
