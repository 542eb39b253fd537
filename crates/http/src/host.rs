//! DNS rebinding guard: on a loopback address or a unix socket, only requests naming a
//! loopback host are answered.
//!
//! Why: a web page the operator visits can point a name it controls at 127.0.0.1 and then read
//! this listener from the operator's own browser (same origin as far as the browser knows).
//! The `Host` header still carries that name, so refusing non-loopback names closes the hole.
//! A listener bound to another address is meant to be reached by name or address from
//! elsewhere, so there any `Host` is accepted (see OPERATIONS.md for what that exposes).

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Whether `host` (a `Host` header's value, with or without a port) names this machine's
/// loopback: `localhost`, `127.0.0.1` (any of 127.0.0.0/8) or `[::1]`, in any case.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inner, port)) if port.is_empty() || port.starts_with(':') => inner,
            _ => return false,
        }
    } else {
        host.split(':').next().unwrap_or("")
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Middleware: answers 421 with a one-line body to a request whose `Host` is not loopback. A
/// request without `Host` (HTTP/1.0 tools) is served: browsers always send one.
pub async fn loopback_only(req: Request, next: Next) -> Response {
    if let Some(host) = req.headers().get(header::HOST) {
        let host = host.to_str().unwrap_or("");
        if !is_loopback_host(host) {
            return (
                StatusCode::MISDIRECTED_REQUEST,
                "this fleet listener answers only Host localhost, 127.0.0.1 or [::1]\n",
            )
                .into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::is_loopback_host;

    #[test]
    fn loopback_names_with_any_port_and_nothing_else() {
        for ok in [
            "localhost",
            "LOCALHOST:9464",
            "127.0.0.1",
            "127.0.0.1:80",
            "127.1.2.3:1",
            "[::1]",
            "[::1]:9464",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:9464",
            "localhost.evil.example.com",
            "10.0.0.1:9464",
            "[::2]:1",
            "[::1]x",
            "",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
