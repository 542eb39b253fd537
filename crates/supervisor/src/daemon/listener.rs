//! What the daemon hears from outside its process: the control socket, SIGTERM/SIGINT/SIGHUP,
//! and edits of fleet.toml. Each listener turns what it hears into an [`Event`] on the loop's
//! channel and does nothing else.
//!
//! A listener must never touch the daemon's state or the database: a nudge is only a hint (every
//! fact lives in the database), so a lost one costs at most a tick of latency, never a run.
//!
//! Order at start (see [`super::run`]): the signal handlers are installed first of all, so that
//! a stop asked for during the start is held for the loop's first turn (or, while the database
//! is waited for, ends the wait) instead of killing the process halfway through; the control
//! socket is bound only once the takeover is done, so that its presence tells commands the
//! daemon is in charge (a dead daemon's socket file is removed as soon as the lock is taken).
//! A `health` request on the socket is answered here, from the heartbeat alone, and a `slots`
//! request from what the loop published at its last turn, without waiting for the loop.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Waker};

use health::Health;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::JoinHandle;

use super::events::{Event, Events};
use crate::control::{slots_line, HealthReply, Nudge, HEALTH_REQUEST, SLOTS_REQUEST};
use crate::slots::PublishedSlots;
use crate::watch::ConfigWatcher;

/// Listens on the control socket `path`; each line is a [`Nudge`], sent on as an [`Event`], or
/// a health request, answered on the same connection from `health` (the heartbeat alone: the
/// answer never waits for the loop, so a stuck loop is reported, not waited for).
/// Binds before it returns (a socket file left at `path` belongs to a dead daemon, since the
/// caller holds the daemon lock, and is replaced); the accepting runs in the returned task.
///
/// Errors: the socket cannot be bound.
pub(super) fn control_socket(
    path: &Path,
    events: Events,
    health: Arc<Health>,
    slots: Arc<PublishedSlots>,
) -> io::Result<JoinHandle<()>> {
    let _ = std::fs::remove_file(path);
    let (address, _folder) = crate::control::addressable(path)?;
    let listener = tokio::net::UnixListener::bind(&address)?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let events = events.clone();
            let health = health.clone();
            let slots = slots.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.trim() == HEALTH_REQUEST {
                        let verdict = health.verdict(store::now_ms());
                        let reply = HealthReply::from_verdict(&verdict).line() + "\n";
                        // The asker may have given up (its timeout): nothing to do about it.
                        let _ = write.write_all(reply.as_bytes()).await;
                        continue;
                    }
                    if line.trim() == SLOTS_REQUEST {
                        let reply = slots_line(&slots.ids()) + "\n";
                        let _ = write.write_all(reply.as_bytes()).await;
                        continue;
                    }
                    let event = match Nudge::parse(&line) {
                        Some(Nudge::Eval) => Event::Nudge,
                        Some(Nudge::Reload) => Event::Reload,
                        None => {
                            tracing::warn!(line = %line, "unknown message on the control socket");
                            continue;
                        }
                    };
                    let _ = events.send(event);
                }
            });
        }
    }))
}

/// The daemon's handlers for SIGTERM and SIGINT (stop) and SIGHUP (reload), installed first
/// thing at start: a signal that arrives before the loop runs (while the daemon waits for its
/// database, takes over or recovers) is held, not fatal. Without a handler the kernel's default
/// action would end the process on the spot, leaving its sockets behind and its exit status a
/// signal's, in the middle of a start it could have finished or left cleanly.
pub(super) struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// Installs the three handlers; from here on the signals are caught for the life of the
    /// process.
    ///
    /// Errors: a handler cannot be installed.
    pub(super) fn install() -> io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for SIGTERM or SIGINT (SIGHUP is held for the loop, which reloads), and names the
    /// one that came. Cancel-safe: a signal caught while this was not polled is returned at
    /// the next call.
    pub(super) async fn stop(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }

    /// Sends what the handlers catch as events from the returned task. What they caught
    /// already is sent before this returns, so that the loop's first turn sees a stop asked for
    /// during the start before it claims anything.
    pub(super) fn forward(mut self, events: Events) -> JoinHandle<()> {
        let mut cx = Context::from_waker(Waker::noop());
        let caught = [
            (self.term.poll_recv(&mut cx), Event::Stop("SIGTERM")),
            (self.int.poll_recv(&mut cx), Event::Stop("SIGINT")),
            (self.hup.poll_recv(&mut cx), Event::Reload),
        ];
        for (poll, event) in caught {
            if poll.is_ready() {
                let _ = events.send(event);
            }
        }
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    _ = self.term.recv() => Event::Stop("SIGTERM"),
                    _ = self.int.recv() => Event::Stop("SIGINT"),
                    _ = self.hup.recv() => Event::Reload,
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        })
    }
}

/// Watches fleet.toml at `path` for edits, each sent as [`Event::ConfigEdited`] (the loop
/// reloads once the file has been quiet for a while, so an editor caught between its truncate
/// and its write is not applied: a cut-off file can parse, and would cancel the queued runs of
/// every project it lost).
///
/// `None` when watching is off — `FLEET_WATCH=0`, for filesystems where inotify misbehaves and
/// tests that must see SIGHUP or `fleet reload` alone do the work — or cannot be set up (logged:
/// edits then need `fleet reload` or SIGHUP). Dropping the watcher stops it.
pub(super) fn config_edits(path: &Path, events: Events) -> Option<ConfigWatcher> {
    let watching = std::env::var_os("FLEET_WATCH").is_none_or(|v| v != "0");
    if !watching {
        tracing::info!(
            "FLEET_WATCH=0: edits of the config are read on SIGHUP or `fleet reload` only"
        );
        return None;
    }
    match crate::watch::watch(path, move || {
        let _ = events.send(Event::ConfigEdited);
    }) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the config file; use `fleet reload` or SIGHUP after edits");
            None
        }
    }
}
