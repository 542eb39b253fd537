//! A `postgresql://` URL cut into its parts the way the driver cuts it, for what must know where
//! each part is without connecting: the checks the driver leaves out (a malformed
//! percent-escape, a `connect_timeout` that is not a number of seconds), which must name the
//! part that is wrong without repeating it (it may be the password); and the password itself,
//! which the config a host publishes for the fleet must not carry ([`mask_password`]).
//!
//! The driver's parser is libpq's loose one, and this module follows it to the byte, so that the
//! password found here is the one the driver would send: the credentials end at the first `@`
//! of the whole text (whatever comes before a `/` or `?`), the user ends at their first `:`, the
//! host ends at the next `/` or `?`, the database name at the next `?`, and each parameter's name
//! at the next `=` and its value at the next `&`. A password may also be given as the
//! `password` parameter.

use std::borrow::Cow;
use std::ops::Range;

/// What stands for a password in a URL with its password masked ([`mask_password`]).
pub const PASSWORD_MASK: &str = "********";

/// Where each part of a `postgresql://` URL lies in its text (byte ranges, as written: still
/// percent-encoded).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Parts {
    /// The user, when the URL has credentials (text before an `@`).
    pub(crate) user: Option<Range<usize>>,
    /// The password, when the credentials hold a `:`.
    pub(crate) password: Option<Range<usize>>,
    /// The host list (`host[:port],…`); may be empty.
    pub(crate) host: Range<usize>,
    /// The database name, when a `/` follows the host.
    pub(crate) dbname: Option<Range<usize>>,
    /// The parameters after `?`: each one's name and value (`None`: a name with no `=` after
    /// it, which the driver refuses).
    pub(crate) params: Vec<(Range<usize>, Option<Range<usize>>)>,
}

/// Cuts `url` into its [`Parts`]; `None` when it does not start with `postgresql://` or
/// `postgres://`.
pub(crate) fn cut(url: &str) -> Option<Parts> {
    let start = ["postgresql://", "postgres://"]
        .iter()
        .find(|p| url.starts_with(**p))?
        .len();
    let mut parts = Parts::default();
    let mut at = start;
    if let Some(end) = url[at..].find('@').map(|i| at + i) {
        match url[at..end].find(':').map(|i| at + i) {
            Some(colon) => {
                parts.user = Some(at..colon);
                parts.password = Some(colon + 1..end);
            }
            None => parts.user = Some(at..end),
        }
        at = end + 1;
    }
    let host_end = url[at..].find(['/', '?']).map_or(url.len(), |i| at + i);
    parts.host = at..host_end;
    at = host_end;
    if url[at..].starts_with('/') {
        let end = url[at..].find('?').map_or(url.len(), |i| at + i);
        parts.dbname = Some(at + 1..end);
        at = end;
    }
    if url[at..].starts_with('?') {
        at += 1;
        while at < url.len() {
            let Some(eq) = url[at..].find('=').map(|i| at + i) else {
                parts.params.push((at..url.len(), None));
                break;
            };
            let end = url[eq + 1..].find('&').map_or(url.len(), |i| eq + 1 + i);
            parts.params.push((at..eq, Some(eq + 1..end)));
            at = if end < url.len() { end + 1 } else { end };
        }
    }
    Some(parts)
}

/// `s` percent-decoded as the driver decodes it: a `%` followed by two hex digits is that byte,
/// anything else is kept as it is.
pub(crate) fn percent_decode(s: &str) -> Cow<'_, [u8]> {
    let b = s.as_bytes();
    if !b.contains(&b'%') {
        return Cow::Borrowed(b);
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// Checks what the driver lets through of a URL cut into `parts`: every `%` in any part must
/// start an escape of two hex digits other than `%00` (the driver keeps a malformed one as
/// written, so `p%zz` would be sent as a password libpq reads differently, and `%00` as a NUL
/// that no connection string can hold), and `connect_timeout` must be a whole number of seconds,
/// at least 1 (the driver takes `-5` or `0` as "no timeout", where fleet then waits 10 s: not
/// what was written, whatever was meant).
///
/// Errors: a one-line reason naming the part, never its text (the part may be the password).
pub(crate) fn check(url: &str, parts: &Parts) -> Result<(), String> {
    let named: [(&str, Option<&Range<usize>>); 4] = [
        ("the user", parts.user.as_ref()),
        ("the password", parts.password.as_ref()),
        ("the host", Some(&parts.host)),
        ("the database name", parts.dbname.as_ref()),
    ];
    for (what, range) in named {
        if let Some(range) = range {
            escapes(&url[range.clone()], what)?;
        }
    }
    for (name, value) in &parts.params {
        escapes(&url[name.clone()], "a parameter name")?;
        let name = String::from_utf8_lossy(&percent_decode(&url[name.clone()])).into_owned();
        // Named only when it reads as a parameter name: anything else is not repeated.
        let shown =
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                format!("the value of `{name}`")
            } else {
                "a parameter's value".to_string()
            };
        let Some(value) = value else { continue };
        escapes(&url[value.clone()], &shown)?;
        if name == "connect_timeout" {
            let value = percent_decode(&url[value.clone()]);
            let seconds = std::str::from_utf8(&value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .map(|v| v.trim_start_matches('0'));
            if seconds.is_none_or(str::is_empty) {
                return Err(
                    "`connect_timeout` must be a whole number of seconds, at least 1 (leave it \
                     out to wait at most 10 s)"
                        .into(),
                );
            }
        }
    }
    Ok(())
}

/// Checks the percent-escapes of `text`, `what` naming it in the message.
fn escapes(text: &str, what: &str) -> Result<(), String> {
    let b = text.as_bytes();
    for (i, _) in b.iter().enumerate().filter(|(_, c)| **c == b'%') {
        let hex = |j: usize| b.get(j).is_some_and(u8::is_ascii_hexdigit);
        if !(hex(i + 1) && hex(i + 2)) {
            return Err(format!(
                "{what} holds a malformed percent-escape: a '%' must be followed by two hex \
                 digits (write %25 for a '%' itself)"
            ));
        }
        if b[i + 1] == b'0' && b[i + 2] == b'0' {
            return Err(format!(
                "{what} holds %00, a NUL byte, which no connection can send"
            ));
        }
    }
    Ok(())
}

/// `url` with every password the driver would send replaced by [`PASSWORD_MASK`]: the one in
/// its credentials (`user:PASSWORD@`) and the value of a `password` parameter. Everything else
/// is kept byte for byte, so that two URLs that differ only by their passwords mask to the same
/// text, and a URL with no password comes back unchanged (borrowed). Text that is not a
/// `postgresql://` URL comes back unchanged too.
pub fn mask_password(url: &str) -> Cow<'_, str> {
    let Some(parts) = cut(url) else {
        return Cow::Borrowed(url);
    };
    let mut secrets: Vec<Range<usize>> = parts.password.into_iter().collect();
    secrets.extend(parts.params.iter().filter_map(|(name, value)| {
        let name = percent_decode(&url[name.clone()]);
        value.clone().filter(|_| &*name == b"password")
    }));
    if secrets.iter().all(|r| &url[r.clone()] == PASSWORD_MASK) {
        return Cow::Borrowed(url);
    }
    let mut out = String::with_capacity(url.len());
    let mut at = 0;
    // The ranges come in the order they lie in the text, and never overlap.
    for r in secrets {
        out.push_str(&url[at..r.start]);
        out.push_str(PASSWORD_MASK);
        at = r.end;
    }
    out.push_str(&url[at..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_are_cut_where_the_driver_cuts_them() {
        let url = "postgresql://fleet:se:cr/et@db.internal:5432,h2/jobs?connect_timeout=5&a=b";
        let p = cut(url).unwrap();
        let at = |r: &Range<usize>| &url[r.clone()];
        assert_eq!(p.user.as_ref().map(at), Some("fleet"));
        assert_eq!(p.password.as_ref().map(at), Some("se:cr/et"));
        assert_eq!(at(&p.host), "db.internal:5432,h2");
        assert_eq!(p.dbname.as_ref().map(at), Some("jobs"));
        let params: Vec<(&str, Option<&str>)> = p
            .params
            .iter()
            .map(|(k, v)| (at(k), v.as_ref().map(at)))
            .collect();
        assert_eq!(params, [("connect_timeout", Some("5")), ("a", Some("b"))]);
        let p = cut("postgres://fleet@/jobs?host=/run/postgresql").unwrap();
        assert!(p.password.is_none());
        assert!(cut("mysql://u:p@h/d").is_none());
    }

    #[test]
    fn every_password_is_masked_and_nothing_else() {
        for (url, masked) in [
            (
                "postgresql://fleet:hunter2@db.internal:5432/fleet",
                "postgresql://fleet:********@db.internal:5432/fleet",
            ),
            // The driver ends the credentials at the first `@`.
            (
                "postgres://u:p%40ss@h/d?connect_timeout=5",
                "postgres://u:********@h/d?connect_timeout=5",
            ),
            ("postgresql://u:@h/d", "postgresql://u:********@h/d"),
            (
                "postgresql://u@h/d?password=hunter2&sslmode=disable",
                "postgresql://u@h/d?password=********&sslmode=disable",
            ),
            (
                "postgresql://u:a@h/d?pass%77ord=b",
                "postgresql://u:********@h/d?pass%77ord=********",
            ),
        ] {
            assert_eq!(mask_password(url), masked, "{url}");
            assert_eq!(mask_password(masked), masked, "masking twice: {url}");
        }
        for plain in [
            "postgresql://fleet@/fleet?host=/run/postgresql",
            "postgresql:///fleet",
            "not a url",
        ] {
            assert!(matches!(mask_password(plain), Cow::Borrowed(_)), "{plain}");
        }
    }
}
