//! Hosts as fleet.toml names them: the `host` key (which host this daemon is), the
//! `[hosts.<name>]` tables (a host's own capacity) and a project's `hosts` list (where it may
//! run), with the one rule for a host name ([`valid_host_name`]) and the machine's hostname,
//! the default ([`machine_hostname`]).
//!
//! Plain data and pure functions, but for reading the kernel's node name: this module never
//! reads a file, never reports a position (that is `validate`'s) and never decides what runs
//! (the packer does, from [`Config::caps`](crate::Config::caps)).

/// The longest host name accepted, in bytes: the kernel's own limit on a node name, so that
/// any valid machine hostname fits.
pub const MAX_HOST_NAME: usize = 64;

/// Shown as the default of the `host` key.
pub const MACHINE_HOSTNAME: &str = "the machine's hostname";

/// Shown as the default of a project's `hosts` key.
pub const ANY_HOST: &str = "any host";

/// One `[hosts.<name>]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// At most this many runs may be active on the host at once; at least 1. The global and
    /// namespace caps still apply on top.
    pub max_concurrency: usize,
}

/// Whether `name` is an acceptable host name: 1 to [`MAX_HOST_NAME`] characters, each a
/// letter, a digit, `.`, `_` or `-` (what a hostname, short or fully qualified, is made of),
/// so that it can be shown, logged and compared as it is written.
pub fn valid_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_HOST_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Why `name` is not a [`valid_host_name`], for a message; `None` when it is valid.
pub fn host_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("host name must not be empty".to_string())
    } else if name.len() > MAX_HOST_NAME {
        Some(format!(
            "host name {name:?} is {} bytes long; at most {MAX_HOST_NAME}",
            name.len()
        ))
    } else if !valid_host_name(name) {
        Some(format!(
            "invalid host name {name:?}: use only letters, digits, '_', '.' and '-'"
        ))
    } else {
        None
    }
}

/// The name `fleet daemon --host` gave this process ([`name_this_host`]).
static HOST_OVERRIDE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// `fleet daemon --host NAME`: from now on, for this process, [`machine_hostname`] is `name`,
/// so that a config without a `host` key loads on a machine whose own hostname is unusable
/// (the flag makes it irrelevant) and every reload names the host the same way. The first call
/// wins; `name` must be a [`valid_host_name`] (the caller checked it).
pub fn name_this_host(name: &str) {
    let _ = HOST_OVERRIDE.set(name.to_string());
}

/// The machine's hostname (the kernel's node name, as `uname -n` prints it): the host name of
/// a daemon whose fleet.toml has no `host` key.
///
/// # Errors
///
/// A one-line reason when the node name cannot be read or is not a [`valid_host_name`] (a
/// container may have none, or `(none)`): the operator must then name the host, never have
/// fleet make one up that another host could share.
pub fn machine_hostname() -> Result<String, String> {
    if let Some(name) = HOST_OVERRIDE.get() {
        return Ok(name.clone());
    }
    let uts = nix::sys::utsname::uname().map_err(|e| format!("cannot read the hostname: {e}"))?;
    let name = uts.nodename().to_string_lossy().into_owned();
    match host_name_problem(&name) {
        None => Ok(name),
        Some(why) => Err(format!(
            "not set, and the machine's hostname cannot be used ({why}): set host = \"NAME\" \
             or pass fleet daemon --host NAME"
        )),
    }
}

/// The digest of a fleet.toml's bytes: `sha256:` and 64 hex digits. A daemon keeps its file's to
/// tell an edit from a rewrite of the same bytes; hosts compare a file with the published config
/// by [`published_digest`](crate::published_digest), this digest of the text with its
/// `database` password masked.
pub fn digest(text: &[u8]) -> String {
    use sha2::Digest;
    let sum = sha2::Sha256::digest(text);
    let hex: String = sum.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}
