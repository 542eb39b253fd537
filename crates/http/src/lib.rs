//! The daemon's HTTP listener (`http_listen`): `/metrics` for Prometheus, `/healthz` for load
//! balancers and supervisors, JSON under `/api/`, and a read-only dashboard at `/`; and the
//! client `fleet logs` and the listener use to read another host's log.
//!
//! See docs/ARCHITECTURE.md for the bird's-eye view and the code map.
//!
//! Every endpoint only reads: nothing served here changes a run, the queue or the config
//! (cancel, enqueue and the rest stay with the command line, which talks to the database and
//! the control socket). It runs on the daemon's tokio runtime beside the loop and never takes
//! anything from it: what it shows comes from [`Observed`] (the loop's heartbeat, the counters
//! the loop feeds, the config in force) and from database reads on blocking threads. A wedged
//! loop therefore cannot make `/healthz` hang: it answers 503. The daemon depends on this crate
//! (it binds, serves and feeds [`Observed`]); this crate never depends on the daemon.
//!
//! A run's log is reached by run id only (an integer in the path); no part of a request ever
//! becomes a file path.
//!
//! The listener never holds up the loop. Its database reads run on blocking threads, one at a
//! time (the store's pool is shared with the loop). A relay of another host's log runs on a
//! blocking thread of its own, outside that one read, at most four at once, each bounded for
//! the whole exchange ([`remote::TIMEOUT`]): however slowly a host (or whatever took its
//! address) answers, and however many viewers ask, the blocking threads the loop's database
//! calls need are never all taken. The accept loop holds a bounded number of connections, so
//! HTTP clients can never take the descriptors the loop spawns with.
//!
//! # Layout
//!
//! - this file: binding ([`bind`], [`Bound`]), serving ([`serve`]), the routes, and `/healthz`
//!   and `/metrics`' handlers;
//! - `observed`: [`Observed`], what the listener may look at, and the answer when a database read
//!   fails;
//! - `counters`: [`Metrics`], the counters and histograms the loop feeds;
//! - `metrics`: the `/metrics` exposition of those counters and a snapshot of the database;
//! - `api`: the JSON under `/api/`;
//! - [`runs_json`]: a run as JSON, the one shape `/api/` serves and `fleet runs --json` prints;
//! - `log`: a run's log by run id and offset, this host's or relayed from another's;
//! - [`remote`]: the client of another host's log API (the relay, and `fleet logs`);
//! - `page` and `assets`: the dashboard's HTML, and its stylesheet and script, embedded;
//! - `serve`: the accept loop (a connection cap, header read timeouts);
//! - `host`: on loopback or a unix socket, a request for another `Host` is refused.

mod api;
mod assets;
mod counters;
mod host;
mod log;
pub mod metrics;
mod observed;
mod page;
pub mod remote;
pub mod runs_json;
mod serve;

use std::io;
use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use config::HttpListen;
use health::Verdict;
use store::now_ms;
use tokio::task::JoinHandle;

pub use counters::Metrics;
use observed::unavailable;
pub use observed::Observed;

/// A bound HTTP listener, not yet serving.
pub enum Bound {
    /// On a TCP address.
    Tcp(tokio::net::TcpListener),
    /// On a unix socket, at the path given (the listener itself was bound under a temporary
    /// name, so its own address is not the one to show).
    Unix(tokio::net::UnixListener, std::path::PathBuf),
}

impl Bound {
    /// Where it listens, as an operator would write it (the port chosen when 0 was given).
    pub fn address(&self) -> String {
        match self {
            Bound::Tcp(l) => l
                .local_addr()
                .map(|a| format!("http://{a}"))
                .unwrap_or_else(|_| "http://?".into()),
            Bound::Unix(_, path) => format!("unix:{}", path.display()),
        }
    }

    /// The URL base other hosts reach this listener at (`http://IP:PORT`, with the port
    /// actually bound, so `:0` never leaks out), or `None` for a unix socket, which no other
    /// host can reach. A wildcard address (`0.0.0.0`, `::`) is no address to connect to: the
    /// host's name (`host`, which must then resolve on the other hosts) stands for it.
    pub fn reachable_at(&self, host: &str) -> Option<String> {
        match self {
            Bound::Tcp(l) => l.local_addr().ok().map(|a| {
                if a.ip().is_unspecified() {
                    format!("http://{host}:{}", a.port())
                } else {
                    format!("http://{a}")
                }
            }),
            Bound::Unix(..) => None,
        }
    }
}

/// Binds `listen`. At a unix socket path, whatever is there already is left alone unless it is
/// a socket nobody answers on (left by a program that is gone), which is replaced; the new
/// socket is made mode 0600 before it appears at `path`: it is bound under a temporary name
/// in the same folder, given its mode, then renamed into place, so nobody ever sees it with the
/// mode the umask gave it.
///
/// Errors: the address cannot be bound (in use — for a socket path, a socket something answers
/// on, or a file that is not a socket —, not local, no permission), or the socket's mode cannot
/// be set.
pub async fn bind(listen: &HttpListen) -> io::Result<Bound> {
    match listen {
        HttpListen::Tcp(addr) => Ok(Bound::Tcp(tokio::net::TcpListener::bind(addr).await?)),
        HttpListen::Unix(path) => {
            clear_stale_socket(path)?;
            let mut staged = path.as_os_str().to_owned();
            staged.push(format!(".{}.binding", std::process::id()));
            let staged = std::path::PathBuf::from(staged);
            // Left by a daemon of the same pid that died here: nobody can be using it.
            let _ = std::fs::remove_file(&staged);
            let listener = tokio::net::UnixListener::bind(&staged)?;
            let placed = std::fs::set_permissions(
                &staged,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .and_then(|()| std::fs::rename(&staged, path));
            if let Err(e) = placed {
                let _ = std::fs::remove_file(&staged);
                return Err(e);
            }
            Ok(Bound::Unix(listener, path.clone()))
        }
    }
}

/// Removes a socket at `path` that nothing answers on. Errors (`AddrInUse`): something answers
/// on it (another program's socket, which removing would silently take over), or the file is
/// not a socket.
fn clear_stale_socket(path: &std::path::Path) -> io::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "a file that is not a socket is there",
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another program is listening on this socket",
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path),
        Err(e) => Err(e),
    }
}

/// Removes the socket file of `listen` if it is a unix socket (the daemon stops cleanly).
pub fn remove_socket(listen: &HttpListen) {
    if let HttpListen::Unix(path) = listen {
        let _ = std::fs::remove_file(path);
    }
}

/// Serves `bound` until the returned task is aborted (the daemon stops).
pub fn serve(bound: Bound, observed: Arc<Observed>) -> JoinHandle<()> {
    let local = match &bound {
        Bound::Tcp(l) => l.local_addr().is_ok_and(|a| a.ip().is_loopback()),
        Bound::Unix(..) => true,
    };
    let mut app = router(observed);
    if local {
        app = app.layer(axum::middleware::from_fn(host::loopback_only));
    }
    tokio::spawn(async move {
        match bound {
            Bound::Tcp(l) => serve::run(l, app).await,
            Bound::Unix(l, _) => serve::run(l, app).await,
        }
    })
}

/// Every route. Only GET (and HEAD) are routed: any other method is refused with 405.
fn router(observed: Arc<Observed>) -> Router {
    Router::new()
        .route("/", get(page::index))
        .route("/runs/{id}", get(page::run))
        .route("/assets/{name}", get(assets::get))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_handler))
        .route("/api/overview", get(api::overview))
        .route("/api/runs", get(api::runs))
        .route("/api/runs/{id}", get(api::run))
        .route("/api/runs/{id}/log", get(log::log))
        .layer(axum::middleware::map_response(harden))
        .with_state(observed)
}

/// Headers every answer carries: nothing is sniffed as another type, nothing is framed, and a
/// page may load its script and style from this server alone.
async fn harden(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

type Shared = axum::extract::State<Arc<Observed>>;

/// `GET /healthz`: 200 while the loop completes a turn within three ticks, 503 otherwise; a
/// one-line body says which and why. Reads the heartbeat alone (never the database).
async fn healthz(axum::extract::State(o): Shared) -> Response {
    match o.health.verdict(now_ms()) {
        Verdict::Evaluating { since_last_turn_ms } => {
            let body = match since_last_turn_ms {
                Some(ms) => format!("ok: the daemon's loop completed a turn {ms} ms ago\n"),
                None => "ok: the daemon is starting (recovery)\n".to_string(),
            };
            (StatusCode::OK, body).into_response()
        }
        Verdict::Stuck { reason } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("stuck: {reason}\n"),
        )
            .into_response(),
    }
}

/// `GET /metrics`.
async fn metrics_handler(axum::extract::State(o): Shared) -> Response {
    // One `now` for the read and the ages computed from it, so a run is ready or not in both.
    let now = now_ms();
    let snap = o
        .read(move |o| -> Result<_, store::StoreError> {
            Ok(metrics::Snapshot {
                ended: o.store.ended_totals()?,
                queued: o.store.queue_summary(now)?,
                // A row fleet cannot read is left out (the overview names it).
                active: o.store.active_rows()?.runs,
                schedules: o.store.schedules()?,
            })
        })
        .await;
    match snap {
        Ok(Ok(snap)) => {
            let body = metrics::render(&o, &o.config(), &snap, now);
            ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response()
        }
        Ok(Err(e)) => unavailable(&e),
        Err(e) => unavailable(&e),
    }
}
