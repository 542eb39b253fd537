//! TLS to PostgreSQL with libpq's settings: `sslmode` (`disable`, `prefer`, `require`,
//! `verify-ca`, `verify-full`), `sslrootcert`, `sslcert` and `sslkey`, read from the connection
//! string by fleet itself and taken out of it before the driver reads the rest (the driver knows
//! only disable/prefer/require and refuses the other keys).
//!
//! What each mode does, as libpq does it:
//! - `disable`: never TLS.
//! - `prefer` (the default): TLS when the server offers it, with no check of its certificate;
//!   plain otherwise.
//! - `require`: TLS or no connection, no check of the certificate — unless `sslrootcert` is
//!   given, when it is `verify-ca` (libpq's rule).
//! - `verify-ca`: TLS or no connection, and the certificate must chain to a CA of `sslrootcert`
//!   (the system's roots when absent, or `sslrootcert=system`); its names are not checked.
//! - `verify-full`: as `verify-ca`, and the certificate must be for the host connected to.
//!
//! `require` and the `verify-*` modes never fall back to a plain connection: the driver is told
//! TLS is required, and fails when the server answers that it has none. A client certificate
//! (`sslcert` with `sslkey`) is sent when the server asks for one. A key file that its group or
//! others may read is refused, as libpq refuses it.
//!
//! Nothing here keeps a file's contents beyond building the TLS settings of one store: the
//! published config (`config::published`) carries the URL, paths and all, never a key.

use std::borrow::Cow;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::url::{cut, percent_decode};

/// The connector every connection of a store uses (pool, first connection, change probe).
pub(crate) type Connector = MakeRustlsConnect;

/// The keys fleet reads itself and takes out of the connection string.
const KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// libpq's `sslmode`, the ones fleet knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(text: &str) -> Result<Mode, String> {
        Ok(match text {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            // Named only when it is short and plain: a value is never a secret, but a typo may
            // hold anything.
            other => {
                let shown = if other.len() <= 20
                    && other.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                {
                    format!("sslmode={other}")
                } else {
                    "this sslmode".into()
                };
                return Err(format!(
                    "{shown} is not one fleet knows: write disable, prefer, require, verify-ca \
                     or verify-full (invalid value for option `sslmode`)"
                ));
            }
        })
    }

    /// The mode as `sslmode` writes it.
    fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }

    /// The driver's mode: whether TLS is tried, and whether a plain connection is allowed.
    pub(crate) fn driver(self) -> postgres::config::SslMode {
        use postgres::config::SslMode;
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// The TLS settings of a connection string, as written (files not read yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) mode: Mode,
    /// `sslrootcert`: a file of CA certificates; `None` for the system's roots.
    pub(crate) root_cert: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

/// Splits `conninfo` (a `postgresql://` URL or `key=value` pairs) into what the driver reads
/// (the string without fleet's TLS keys) and the TLS [`Settings`].
///
/// Errors: a one-line reason naming the key (an unknown `sslmode`, a key given twice, a value
/// that is not UTF-8, a certificate without its key), never the string itself.
pub(crate) fn split(conninfo: &str) -> Result<(String, Settings), String> {
    let (rest, found) = match cut(conninfo) {
        Some(parts) => split_url(conninfo, &parts),
        None => split_pairs(conninfo),
    };
    let mut mode = None;
    let (mut root_cert, mut cert, mut key) = (None, None, None);
    let mut system_roots = false;
    let mut seen: Vec<&str> = Vec::new();
    for (name, value) in found {
        // The driver (and libpq) would take the last of two: a string that reads `verify-full`
        // to whoever checks it could then connect in plain text.
        if seen.contains(&name) {
            return Err(format!(
                "`{name}` is given twice: give each TLS setting once"
            ));
        }
        seen.push(name);
        let value = String::from_utf8(value.into_owned())
            .map_err(|_| format!("the value of `{name}` is not UTF-8"))?;
        if name == "sslmode" {
            mode = Some(Mode::parse(&value)?);
            continue;
        }
        if name == "sslrootcert" && value == "system" {
            system_roots = true;
            continue;
        }
        // A path taken from the working directory would name another file for a daemon
        // started elsewhere (by systemd, from `/`): refused, not guessed.
        let path = PathBuf::from(&value);
        if !path.is_absolute() {
            return Err(format!(
                "`{name}` {value}: give an absolute path (a relative one would depend on the \
                 folder a command is run from)"
            ));
        }
        match name {
            "sslrootcert" => root_cert = Some(path),
            "sslcert" => cert = Some(path),
            _ => key = Some(path),
        }
    }
    let mode = match (mode, system_roots, root_cert.is_some()) {
        // libpq: the system's roots are for checking a server's name, and only that.
        (None | Some(Mode::VerifyFull), true, _) => Mode::VerifyFull,
        (Some(other), true, _) => {
            return Err(format!(
                "`sslrootcert=system` is for sslmode=verify-full only (the system's CAs vouch \
                 for a server's name, so its name must be checked), not sslmode={}: write \
                 sslmode=verify-full, or leave sslmode out",
                other.name()
            ))
        }
        // libpq: `require` with a root certificate given behaves as `verify-ca`.
        (Some(Mode::Require), false, true) => Mode::VerifyCa,
        (mode, false, _) => mode.unwrap_or(Mode::Prefer),
    };
    match (&cert, &key) {
        (Some(_), None) => return Err("`sslcert` is given without `sslkey`".into()),
        (None, Some(_)) => return Err("`sslkey` is given without `sslcert`".into()),
        _ => {}
    }
    Ok((
        rest,
        Settings {
            mode,
            root_cert,
            cert,
            key,
        },
    ))
}

/// The TLS keys found in a connection string, with their values (decoded).
type Found<'a> = Vec<(&'static str, Cow<'a, [u8]>)>;

/// [`split`] for a URL: the TLS parameters taken out, the others kept byte for byte.
fn split_url<'a>(url: &'a str, parts: &super::url::Parts) -> (String, Found<'a>) {
    let mut found = Vec::new();
    let mut kept = Vec::new();
    for (name, value) in &parts.params {
        let decoded = percent_decode(&url[name.clone()]);
        match (KEYS.iter().find(|k| k.as_bytes() == &*decoded), value) {
            (Some(key), Some(value)) => found.push((*key, percent_decode(&url[value.clone()]))),
            _ => kept.push(match value {
                Some(v) => &url[name.start..v.end],
                None => &url[name.clone()],
            }),
        }
    }
    let Some(query) = parts.params.first().map(|(name, _)| name.start - 1) else {
        return (url.to_string(), found);
    };
    let mut rest = url[..query].to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    (rest, found)
}

/// [`split`] for `key=value` pairs (values may be single-quoted, with `\` escapes, as libpq
/// reads them). A string that does not read as pairs is kept whole, for the driver to refuse.
fn split_pairs(text: &str) -> (String, Found<'static>) {
    let b = text.as_bytes();
    let mut found = Vec::new();
    let mut rest = String::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let key_start = i;
        while i < b.len() && b[i] != b'=' && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &text[key_start..i];
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() || b[i] != b'=' {
            return (text.to_string(), Vec::new());
        }
        i += 1;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = Vec::new();
        let quoted = b.get(i) == Some(&b'\'');
        if quoted {
            i += 1;
        }
        loop {
            match b.get(i) {
                None if quoted => return (text.to_string(), Vec::new()),
                None => break,
                Some(b'\'') if quoted => {
                    i += 1;
                    break;
                }
                Some(c) if !quoted && c.is_ascii_whitespace() => break,
                Some(b'\\') if i + 1 < b.len() => {
                    value.push(b[i + 1]);
                    i += 2;
                }
                Some(c) => {
                    value.push(*c);
                    i += 1;
                }
            }
        }
        match KEYS.iter().find(|k| **k == key) {
            Some(k) => found.push((*k, Cow::Owned(value))),
            None => rest.push_str(&text[start..i]),
        }
    }
    (rest.trim_start().to_string(), found)
}

/// The connector for `settings`: reads the CA file, the client certificate and its key.
///
/// Errors: a one-line reason naming the file (missing, unreadable, holding no certificate or
/// key, a key its group or others may read).
pub(crate) fn connector(settings: &Settings) -> Result<Connector, String> {
    // ring: C and assembly only, no cmake. rustls deprecates its provider for lacking
    // post-quantum key exchange (aws-lc-rs has it, at the price of a far heavier build); the
    // classical suites it has are the ones PostgreSQL servers offer today.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let check = match settings.mode {
        Mode::Disable | Mode::Prefer | Mode::Require => Check::Nothing,
        Mode::VerifyCa => Check::Chain,
        Mode::VerifyFull => Check::ChainAndName,
    };
    // Only what is used is read: a CA file named with `prefer` is not (libpq's `prefer` does
    // not check the certificate either).
    let webpki = match check {
        Check::Nothing => None,
        Check::Chain | Check::ChainAndName => {
            let roots = roots(settings.root_cert.as_deref())?;
            Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| format!("the CA certificates cannot be used: {e}"))?,
            )
        }
    };
    let verifier = Arc::new(Verifier {
        check,
        webpki,
        provider: provider.clone(),
    });
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS settings: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&settings.cert, &settings.key) {
        (Some(cert), Some(key)) if settings.mode != Mode::Disable => builder
            .with_client_auth_cert(certificates(cert, "sslcert")?, private_key(key)?)
            .map_err(|e| {
                format!(
                    "sslcert {} and sslkey {} do not go together: {e}",
                    cert.display(),
                    key.display()
                )
            })?,
        _ => builder.with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The CA certificates of `file`, or the system's roots when `None`.
fn roots(file: Option<&Path>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match file {
        Some(file) => {
            for cert in certificates(file, "sslrootcert")? {
                roots.add(cert).map_err(|e| {
                    format!(
                        "sslrootcert {}: a certificate cannot be used as a CA: {e}",
                        file.display()
                    )
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(
                    "no sslrootcert given, and the system has no CA certificates to check the \
                     server's certificate against: give sslrootcert=/path/to/ca.crt"
                        .into(),
                );
            }
        }
    }
    Ok(roots)
}

/// Every PEM certificate of `file`, `key` naming the setting in messages.
fn certificates(file: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(file, key)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{key} {}: not a PEM certificate file: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{key} {}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            file.display()
        ));
    }
    Ok(certs)
}

/// The private key of `file`, after libpq's check of its permissions.
fn private_key(file: &Path) -> Result<PrivateKeyDer<'static>, String> {
    key_permissions(file)?;
    let bytes = read(file, "sslkey")?;
    // PKCS#8's `ENCRYPTED PRIVATE KEY`, or the older `Proc-Type: 4,ENCRYPTED` header.
    if bytes.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err(format!(
            "sslkey {}: the key is encrypted with a passphrase, which fleet cannot ask for: \
             give a key without one (`openssl pkey -in KEY -out PLAIN`, mode 0600)",
            file.display()
        ));
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        format!(
            "sslkey {}: holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
            file.display()
        )
    })
}

/// libpq's rule: a key file must give its group and others nothing (0600 or stricter), unless
/// root owns it, when its group may read it (0640 or stricter).
pub(crate) fn key_permissions(file: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file).map_err(|e| file_error(file, "sslkey", &e))?;
    if !meta.is_file() {
        return Err(format!("sslkey {}: not a regular file", file.display()));
    }
    let mode = meta.mode() & 0o777;
    // Whoever owns it: a key of another user that its group may read is read by that group.
    let too_open = if meta.uid() == 0 {
        mode & 0o037 != 0
    } else {
        mode & 0o077 != 0
    };
    if too_open {
        return Err(format!(
            "sslkey {}: its group or others may read it (mode {mode:04o}): make it 0600 (or \
             0640 owned by root)",
            file.display()
        ));
    }
    Ok(())
}

/// The most a certificate or key file may hold: a system's whole CA bundle is a few hundred
/// KiB.
const MOST_BYTES: u64 = 4 << 20;

/// The bytes of `file`, a regular file of at most [`MOST_BYTES`]; `key` names the setting in
/// messages. Looked at before it is opened: a FIFO would block the open, a device never end.
fn read(file: &Path, key: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let meta = std::fs::metadata(file).map_err(|e| file_error(file, key, &e))?;
    if !meta.is_file() {
        return Err(format!("{key} {}: not a regular file", file.display()));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MOST_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| file_error(file, key, &e))?;
    if bytes.len() as u64 > MOST_BYTES {
        return Err(format!(
            "{key} {}: larger than {} MiB, more than a certificate or key file holds",
            file.display(),
            MOST_BYTES >> 20
        ));
    }
    Ok(bytes)
}

/// An I/O failure on `file`, in one line.
fn file_error(file: &Path, key: &str, e: &io::Error) -> String {
    let why = match e.kind() {
        io::ErrorKind::NotFound => "no such file".to_string(),
        io::ErrorKind::PermissionDenied => "permission denied (cannot read it)".to_string(),
        _ => e.to_string(),
    };
    format!("{key} {}: {why}", file.display())
}

/// What the server's certificate is checked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// Nothing (`prefer`, `require`): the connection is encrypted, the server not authenticated.
    Nothing,
    /// That it chains to a trusted CA, whatever names it holds (`verify-ca`).
    Chain,
    /// That it chains to a trusted CA and is for the host connected to (`verify-full`).
    ChainAndName,
}

/// The server's certificate checked as [`Check`] says. The handshake's signatures are always
/// checked against the certificate's key, whatever the mode.
#[derive(Debug)]
struct Verifier {
    check: Check,
    /// Set for [`Check::Chain`] and [`Check::ChainAndName`].
    webpki: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = self
            .webpki
            .as_ref()
            .filter(|_| self.check != Check::Nothing)
        else {
            return Ok(ServerCertVerified::assertion());
        };
        let checked =
            webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match checked {
            // The chain is checked before the name: a name mismatch means the chain passed.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.check == Check::Chain => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Why a TLS handshake failed, in words, when `e` is a TLS failure: the certificate's fault
/// (expired, unknown issuer, name mismatch) said for what it is. `None` for any other error.
pub(crate) fn explain(e: &postgres::Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        let found = c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<io::Error>()
                .and_then(io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = found {
            return Some(format!("TLS handshake failed: {}", reason(tls)));
        }
        // The driver's words when the server answers the TLS request with "no" and the mode
        // allows no plain connection: said with what follows from it.
        if c.to_string() == "server does not support TLS" {
            return Some(
                "the server does not support TLS, which this sslmode requires: no plain \
                 connection is made (sslmode=prefer or disable would connect without it)"
                    .into(),
            );
        }
        cause = c.source();
    }
    None
}

/// A rustls failure in words.
fn reason(e: &rustls::Error) -> String {
    let rustls::Error::InvalidCertificate(cert) = e else {
        return e.to_string();
    };
    let when = |t: &UnixTime| {
        chrono::DateTime::from_timestamp(t.as_secs() as i64, 0).map_or_else(
            || "?".into(),
            |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
    };
    match cert {
        CertificateError::Expired => "the server's certificate has expired".into(),
        CertificateError::ExpiredContext { not_after, .. } => format!(
            "the server's certificate has expired (valid until {})",
            when(not_after)
        ),
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "the server's certificate is not valid yet".into()
        }
        CertificateError::UnknownIssuer => "the server's certificate has an unknown issuer: it \
             does not chain to a CA of sslrootcert (the system's roots when sslrootcert is not \
             given)"
            .into(),
        CertificateError::NotValidForName => {
            "name mismatch: the server's certificate is not for the host connected to".into()
        }
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => format!(
            "name mismatch: the server's certificate is not for {:?} (it is for {})",
            expected.to_str(),
            if presented.is_empty() {
                "no name".to_string()
            } else {
                // Shown as rustls names them (`DnsName("db.example")`): the name alone.
                presented
                    .iter()
                    .map(|n| {
                        let inner = n.split_once('(').map_or(n.as_str(), |(_, rest)| rest);
                        inner.trim_end_matches(')').trim_matches('"')
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        CertificateError::Other(other) => match format!("{other:?}") {
            why if why.contains("CaUsedAsEndEntity") => "the server's certificate is a CA's \
                 (self-signed?), not one issued to the server by a CA"
                .into(),
            why if why.contains("UnsupportedCertVersion") => "the server's certificate is X.509 \
                 version 1, which fleet cannot read: reissue it as version 3 (with a \
                 subjectAltName for the server's name)"
                .into(),
            why => format!("the server's certificate was refused: {why}"),
        },
        other => format!("the server's certificate was refused: {other}"),
    }
}

#[cfg(test)]
mod tests;
