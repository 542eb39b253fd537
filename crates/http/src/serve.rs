//! The listener's accept loop: a bounded number of connections, each with a deadline for its
//! request headers and for its whole life.
//!
//! Why not `axum::serve`: it accepts without limit and keeps a silent connection open forever,
//! so enough idle clients (or one client opening sockets in a loop) use up the daemon's file
//! descriptors, and then every spawn fails with EMFILE. The descriptors the loop needs matter
//! more than any HTTP client, so the listener holds at most [`MAX_CONNECTIONS`] at a time.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;

/// Connections served at once. One more is accepted and closed at once (the client sees the
/// connection reset), so the listener never holds more descriptors than this.
pub const MAX_CONNECTIONS: usize = 128;

/// How long a client has to send a request's headers, counted from when the connection is
/// ready for the next request: a half-sent request and an idle keep-alive connection are both
/// closed after this.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a connection is kept, whatever it does (a client that never reads its answer
/// would otherwise hold the connection forever).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

/// Something that hands out connections: a TCP or a unix listener.
pub trait Accept {
    /// The connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection. Errors: accept(2) failed (out of descriptors, aborted connection).
    fn accept(&self) -> impl std::future::Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        tokio::net::TcpListener::accept(self).await.map(|(s, _)| s)
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        tokio::net::UnixListener::accept(self).await.map(|(s, _)| s)
    }
}

/// Serves `app` on `listener` until the task running it is aborted. Never returns otherwise:
/// an accept error (say, EMFILE) is logged and retried after a short pause.
pub async fn run<L: Accept>(listener: L, app: Router) {
    let slots = std::sync::Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let io = match listener.accept().await {
            Ok(io) => io,
            Err(e) => {
                tracing::warn!(error = %e, "the HTTP listener could not accept a connection");
                // Out of descriptors: accepting again at once would spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            // Over the cap: closed at once, so it costs no descriptor beyond this moment.
            drop(io);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(io), service);
            // Errors here are the client's (a reset, a timeout); nothing to report.
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
            drop(permit);
        });
    }
}
