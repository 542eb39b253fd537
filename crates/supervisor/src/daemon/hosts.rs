//! This daemon as one host among several on a shared database: its heartbeat, and its return
//! after an operator forgot it (`fleet hosts forget`).
//!
//! It owns the rule a returning host follows: it writes nothing to the rows of runs taken from
//! it, stops the commands of those runs (their seats are gone: left running they would exceed a
//! cap), and takes over again under a new epoch. It must never end or requeue a run itself
//! here: what remains is settled by the ordinary recovery after the take-over.
//!
//! The heartbeat is written from the loop, every [`HEARTBEAT_EVERY_MS`] (2 s), so that a stuck
//! loop looks silent; a host is alive while its heartbeat is younger than
//! [`store::SILENCE_MS`] (10 s). Silence proves nothing: only an operator's `fleet hosts
//! forget` takes a silent host's runs. On SQLite there is no heartbeat (a write every 2 s would
//! wake an idle daemon's EVAL through the change probe): one state directory is one host, its
//! liveness is its daemon lock, and `hosts forget` is refused.
//!
//! The config in force on a shared database is the published one. A daemon publishes its local
//! file ([`config::published_text`]: its `database` password masked) when nothing is published
//! yet; on an asked reload (`fleet reload`, SIGHUP) whenever the valid file's digest differs from
//! the published one; and on an edit the watcher saw only when the file's content changed since
//! the daemon last read it (a `touch` is no edit), so that a lagging host never republishes its
//! old file by accident, while any host can replace an unusable published version with `fleet
//! reload`. At each EVAL, before packing, it applies a newer published version, parsed and
//! checked as a local file, with this host's own keys (`host`, `state_dir`, `database`,
//! `http_listen`, `log_format`) kept; its claims carry that version, so a claim made just before
//! a publish is refused as stale and packed again with the new caps. A published config this
//! build cannot read is logged once; the last good one stays, and nothing is claimed until a
//! usable one is published. The heartbeat reports the version applied and the local file's
//! digest ([`config::published_digest`]), so `fleet hosts` and `fleet status` say when a host's
//! file differs from the config in force.

use std::time::Instant;

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use runrecord::RunFiles;
use store::{
    now_ms, Applied, HostInfo, Run, RunId, StoreError, HEARTBEAT_EVERY_MS, LOG_TAIL_BYTES,
};

use super::eval::shim_done;
use super::outage::database_unreachable;
use super::state::Daemon;
use crate::core::cancel::identify_shim;
use crate::sys::signals::Signal;

/// Says that `run` was taken from this host by a forget and that its command is being stopped
/// (`sent`: the SIGTERM reached its shim).
pub(super) fn warn_taken(run: &Run, sent: bool) {
    tracing::warn!(
        run = run.id,
        project = %run.project,
        status = %run.status,
        sent_sigterm = sent,
        "this host was forgotten and the run taken from it: stopping its command here (the database row is left as the operator's forget wrote it)"
    );
}

/// On a shared database, records this host's heartbeat when the last one is
/// [`HEARTBEAT_EVERY_MS`] old. Called
/// from the loop itself, never from a timer task of its own: a stuck loop must look silent.
/// A refusal as fenced is kept in [`Membership::fenced`](super::state::Membership::fenced), as any write's; other failures are
/// logged and tried at the next turn.
pub(super) async fn heartbeat(d: &mut Daemon, last: &mut Option<Instant>) {
    // SQLite: one host, whose liveness is its daemon lock (`fleet status`); a write every
    // 2 s would only wake an idle daemon's EVAL (the change probe sees every commit).
    if d.setup.state.database().is_none() {
        return;
    }
    if last.is_some_and(|at| at.elapsed().as_millis() < HEARTBEAT_EVERY_MS as u128) {
        return;
    }
    *last = Some(Instant::now());
    let local = std::fs::read(&d.setup.config_path).ok();
    let info = HostInfo {
        config_version: d.host.published_version,
        // Of the text as it would be published: the password left out, as on the
        // published side, so a file differing by its password alone does not differ.
        config_digest: local.map(|bytes| published_digest_of(d, &bytes)),
        http_addr: d.host.http_addr.clone(),
        clock_offset_ms: None,
    };
    let store = d.setup.store.clone();
    let epoch = d.host.epoch;
    let done = tokio::task::spawn_blocking(move || {
        // The database's clock measured again first: the heartbeat's own time is by it.
        let info = HostInfo {
            clock_offset_ms: super::identity::follow_database_clock(&store)
                .or(store::db_clock::offset_ms()),
            ..info
        };
        store.heartbeat(epoch, &info, now_ms())
    })
    .await
    .expect("heartbeat panicked");
    match done {
        Ok(()) => {}
        Err(e @ StoreError::Fenced { .. }) => d.host.fenced = Some(e),
        Err(e) if database_unreachable(&mut d.holds, &d.report.health, &e, "heartbeat") => {}
        Err(e) => tracing::warn!(error = %e, "could not record the heartbeat; trying again"),
    }
}

/// [`config::published_digest`] of the local file's `bytes`, remembered in
/// [`Membership::heartbeat_digest`](super::state::Membership::heartbeat_digest) by the digest of the bytes themselves.
fn published_digest_of(d: &mut Daemon, bytes: &[u8]) -> String {
    let raw = config::digest(bytes);
    match &d.host.heartbeat_digest {
        Some((seen, published)) if *seen == raw => published.clone(),
        _ => {
            let published = config::published_digest(bytes);
            d.host.heartbeat_digest = Some((raw, published.clone()));
            published
        }
    }
}

/// On a shared database: publishes `text`, this host's local fleet.toml as read and applied
/// (`None`: it could not be read as text), as the fleet's config — at start (`always` false)
/// only when nothing is published yet; after an operator's reload or an edit of its content
/// (`always`) as the next version whenever its digest differs from the published one (the
/// same text is not published twice). What is published is [`config::published_text`]: the
/// file with its `database` password masked, under its digest. A failure is logged; the
/// heartbeat shows the version this host published, if any.
pub(super) async fn publish_local(d: &mut Daemon, always: bool, text: Option<String>) {
    if d.setup.state.database().is_none() {
        return;
    }
    let Some(text) = text else {
        return;
    };
    let text = config::published_text(&text).into_owned();
    let digest = config::digest(text.as_bytes());
    let store = d.setup.store.clone();
    let epoch = d.host.epoch;
    let done = tokio::task::spawn_blocking(move || match store.published_config()? {
        // Compared as every host compares a file with the published text: by the digest of
        // each one's masked text (a text an earlier version published holds the password).
        Some(p) if !always => Ok(if config::published_digest(p.text.as_bytes()) == digest {
            Some(p.version)
        } else {
            None
        }),
        // By the digest stored with it: a text published with its password (by an earlier
        // version) never matches, so an operator's reload replaces it with a masked one.
        Some(p) if p.digest == digest => Ok(Some(p.version)),
        _ => store
            .publish_config(epoch, &text, &digest, now_ms())
            .map(Some),
    })
    .await
    .expect("publishing the config panicked");
    match done {
        Ok(Some(version)) => {
            tracing::info!(version, "the config is published");
            d.host.published_version = Some(version);
        }
        Ok(None) => {
            tracing::warn!("this host's fleet.toml differs from the config published for the fleet")
        }
        Err(e @ StoreError::Fenced { .. }) => d.host.fenced = Some(e),
        Err(e) => tracing::warn!(error = %e, "could not publish the config"),
    }
}

/// On a shared database: applies the published config when its version is not the one in
/// force here — parsed and checked exactly as a local file, with this host's own keys
/// (`host`, `state_dir`, `database`, `http_listen`, `log_format`) kept. One this build
/// cannot read is logged and recorded as the reload error; the last good config stays,
/// and the claims, still carrying the old version, claim nothing until a readable one is
/// published.
pub(super) async fn follow_published(d: &mut Daemon) {
    if d.setup.state.database().is_none() {
        return;
    }
    let store = d.setup.store.clone();
    let published = tokio::task::spawn_blocking(move || store.published_config())
        .await
        .expect("reading the published config panicked");
    let p = match published {
        Ok(Some(p)) if Some(p.version) != d.host.published_version => p,
        Ok(_) => return,
        Err(e) => {
            if !database_unreachable(
                &mut d.holds,
                &d.report.health,
                &e,
                "reading the published config",
            ) {
                tracing::warn!(error = %e, "could not read the published config");
            }
            return;
        }
    };
    match config::Config::published_here(&p.text, &d.setup.config_path, &d.config.current) {
        Ok(new) => {
            let here = &d.config.current;
            // A refusal recorded for an earlier version is cleared with the row's caps.
            if new != **here || d.host.published_refused.take().is_some() {
                if new != **here {
                    d.config.current = std::sync::Arc::new(new);
                    d.report.observed.set_config(d.config.current.clone());
                    d.config.sweep_removed = true;
                }
                // The caps `fleet status` shows are this host's row's.
                let (store, epoch) = (d.setup.store.clone(), d.host.epoch);
                let caps = crate::caps::caps_json(&d.config.current);
                let recorded = tokio::task::spawn_blocking(move || {
                    store.set_daemon_config(epoch, &caps, None, now_ms())
                })
                .await
                .expect("set_daemon_config panicked");
                if let Err(e) = recorded {
                    tracing::warn!(error = %e, "could not record the applied config");
                }
            }
            tracing::info!(version = p.version, by = %p.published_by, "applied the published config");
            d.host.published_version = Some(p.version);
            // Another host's edit leaves this host's file behind: said once per version.
            let local = std::fs::read(&d.setup.config_path).ok();
            let published = config::published_digest(p.text.as_bytes());
            if local.is_some_and(|text| config::published_digest(&text) != published) {
                tracing::warn!(
                    version = p.version,
                    by = %p.published_by,
                    config = %d.setup.config_path.display(),
                    "this host's fleet.toml differs from the config published for the fleet"
                );
            }
        }
        Err(_) if d.host.published_refused == Some(p.version) => {}
        Err(errors) => {
            d.host.published_refused = Some(p.version);
            // Named by its version and publisher: the text is not this host's file.
            let msg = format!(
                "this host refuses published config version {} (by host {}): {errors}",
                p.version, p.published_by
            );
            tracing::error!(
                "{msg}; the last good config stays (and nothing is claimed until a usable one is published)"
            );
            // Recorded as the host's reload error, which `fleet status` shows.
            let (store, epoch) = (d.setup.store.clone(), d.host.epoch);
            let caps = crate::caps::caps_json(&d.config.current);
            let recorded = tokio::task::spawn_blocking(move || {
                store.set_daemon_config(epoch, &caps, Some(&msg), now_ms())
            })
            .await
            .expect("set_daemon_config panicked");
            if let Err(e) = recorded {
                tracing::warn!(error = %e, "could not record the refused config");
            }
        }
    }
}

/// After a refusal as forgotten: stops the commands of the runs taken from this host
/// (their slots are kept until their shims are gone, so that this host starts nothing
/// beside them, their own retries included), takes over again, and has recovery settle the
/// rest. Returns false when the take-over failed (the daemon then stops, fenced as before).
pub(super) async fn rejoin(d: &mut Daemon) -> bool {
    let host = d.config.current.host.clone();
    let ours: Vec<(i64, u64)> = d.runs.slots.iter().map(|s| (s.run_id, s.token)).collect();
    let store = d.setup.store.clone();
    let rows = tokio::task::spawn_blocking(move || {
        ours.iter()
            .map(|(id, _)| store.get_run(*id))
            .collect::<Result<Vec<Run>, StoreError>>()
    })
    .await
    .expect("reading runs panicked");
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e, "forgotten: cannot read this host's runs yet; trying again");
            return true;
        }
    };
    for run in rows {
        let Some(slot) = d.runs.slots.get_mut(run.id) else {
            continue;
        };
        let still_ours = run.status.is_active()
            && run.claim_token == slot.token
            && run.host.as_deref() == Some(host.as_str());
        if still_ours {
            continue;
        }
        identify_shim(&mut d.runs.slots, run.id, d.setup.state.root());
        let Some(slot) = d.runs.slots.get_mut(run.id) else {
            continue;
        };
        let sent = slot.shim.is_some_and(|s| s.signal(Signal::SIGTERM));
        warn_taken(&run, sent);
        slot.cancel_sent = true;
        // Held until the shim is done with the run: its end, when reaped, is a transition
        // the store skips (the row is already ended), and that frees the slot. A shim
        // already done with it was reaped before (its end was the write refused): the slot
        // goes now, by the same rule, or nothing would ever free it.
        if shim_done(d, run.id, Some(Some(run.status))) {
            d.runs.slots.remove(run.id);
        }
    }
    let store = d.setup.store.clone();
    let caps = crate::caps::caps_json(&d.config.current);
    let path = d.setup.config_path.display().to_string();
    let state = d.setup.state.clone();
    let taken = tokio::task::spawn_blocking(move || {
        // In the place it ran from: its runs claimed there stay its own to settle.
        // Its state directory can be looked at (it holds it locked); should it fail, the rejoin
        // records no place rather than none at all being possible to take over.
        let place = super::identity::place(&state).ok().flatten();
        let pid = std::process::id() as i32;
        store.take_over_from(&host, place.as_ref(), pid, &path, &caps, now_ms())
    })
    .await
    .expect("take_over panicked");
    match taken {
        Ok(epoch) => {
            tracing::warn!(epoch, "this host was forgotten; rejoined under a new epoch");
            // The new epoch's claims are made in this boot: said in the `boot` file before
            // the first of them, as at the start, or recovery would take each one that
            // never started for one a restart of the machine may have cut short.
            let root = d.setup.state.root().to_path_buf();
            match tokio::task::spawn_blocking(move || crate::boot::Boots::take(&root, epoch))
                .await
                .expect("recording the boot panicked")
            {
                Ok(boots) => d.setup.boots = boots,
                Err(e) => tracing::warn!(
                    error = %e,
                    "cannot record the new epoch's boot: a claim of it that never started will end lost, not be queued again"
                ),
            }
            d.host.epoch = epoch;
            d.host.fenced = None;
            d.runs.pending.clear();
            d.recovery.done = false;
            true
        }
        Err(e) => {
            tracing::error!(error = %e, "forgotten, and could not take over again: stopping");
            false
        }
    }
}

/// On a shared database: keeps the end of each ended run's log in the database, so that
/// `fleet logs` on another host can show it (the full log stays in this host's `runs/`).
/// A failure is logged and costs only that tail: the run's end is already written. On
/// SQLite (one host, the log is here) nothing is stored.
pub(super) async fn keep_log_tails(d: &mut Daemon, applied: &[(RunId, Applied)]) {
    if d.setup.state.database().is_none() {
        return;
    }
    // Tails a failed attempt left (the database was away) go first, so none is lost.
    let mut ended = std::mem::take(&mut d.runs.unkept_tails);
    ended.extend(applied.iter().filter_map(|(id, a)| match a {
        Applied::Done { status, .. } if status.is_terminal() => Some(*id),
        _ => None,
    }));
    if ended.is_empty() {
        return;
    }
    let store = d.setup.store.clone();
    let root = d.setup.state.root().to_path_buf();
    let epoch = d.host.epoch;
    let done = tokio::task::spawn_blocking(move || {
        for (i, &id) in ended.iter().enumerate() {
            let (tail, cut) = match read_tail(&RunFiles::new(&root, id).log_path()) {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(run = id, error = %e, "no log tail to keep");
                    continue;
                }
            };
            if let Err(e) = store.store_log_tail(epoch, id, &tail, cut) {
                return Err((e, ended[i..].to_vec()));
            }
        }
        Ok(())
    })
    .await
    .expect("keeping log tails panicked");
    match done {
        Ok(()) => {}
        Err((e @ StoreError::Fenced { .. }, _)) => d.host.fenced = Some(e),
        Err((e, unkept)) => {
            // Kept for the next EVAL's try: the database being away must not cost a tail.
            if !database_unreachable(&mut d.holds, &d.report.health, &e, "keeping log tails") {
                tracing::warn!(error = %e, runs = unkept.len(), "could not keep log tails in the database; trying again at the next EVAL");
            }
            d.runs.unkept_tails = unkept;
        }
    }
}

/// The last [`LOG_TAIL_BYTES`] of the file at `path`, and whether it was longer.
fn read_tail(path: &Path) -> std::io::Result<(Vec<u8>, bool)> {
    // A command that never wrote has no log: its tail is empty, and kept as such.
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), false)),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    let keep = LOG_TAIL_BYTES as u64;
    let cut = len > keep;
    if cut {
        f.seek(SeekFrom::Start(len - keep))?;
    }
    let mut tail = Vec::with_capacity(len.min(keep) as usize);
    f.take(keep).read_to_end(&mut tail)?;
    Ok((tail, cut))
}
