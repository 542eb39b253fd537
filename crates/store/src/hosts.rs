//! The row types of many hosts sharing one database: a host's row ([`HostRow`]), what its
//! heartbeat reports ([`HostInfo`]), what forgetting it did ([`Forgotten`]), the published
//! config ([`Published`]) and a run's log tail kept in the database ([`LogTail`]).
//!
//! Plain data, backend-neutral, like `model`: nothing here may name SQL or read the clock. The
//! liveness rule ([`HostRow::state`]) is here so that every command reads "alive" the same way.

use crate::{Millis, Run, RunId, RunStatus};

/// The words a `fleet hosts forget` puts in the reason of each run it ends `lost`, after the
/// host's name.
pub(crate) const FORGOTTEN_REASON: &str = "was forgotten by an operator";

/// Whether `run` was ended `lost` by a `fleet hosts forget` of the host that ran it: its
/// end was declared without the host's word, so a record that host kept of the command's real
/// end may say otherwise without anything being wrong. The forget's words may follow a note
/// the run had already (a scheduled run's missed occurrences, say), after a `; `.
pub fn ended_by_forget(run: &Run) -> bool {
    run.status == RunStatus::Lost
        && run.reason.as_deref().is_some_and(|r| {
            r.split("; ")
                .any(|note| note.starts_with("host ") && note.contains(FORGOTTEN_REASON))
        })
}

/// A heartbeat younger than this (ms) means the host's daemon is alive; older means silent.
/// Silence proves nothing (the host's commands may still run): only an operator's `forget`
/// takes a host's runs from it.
pub const SILENCE_MS: Millis = 10_000;

/// How long the daemon waits between heartbeats (ms), well under [`SILENCE_MS`].
pub const HEARTBEAT_EVERY_MS: Millis = 2_000;

/// The largest log tail kept in the database per run (bytes).
pub const LOG_TAIL_BYTES: usize = 64 * 1024;

/// One host as the database records it: the daemon that holds (or last held) its epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRow {
    /// Its name (`host` key, `--host`, or the machine's hostname).
    pub name: String,
    /// Its epoch: globally unique, bumped by every take-over and every forget.
    pub epoch: i64,
    /// Its daemon's process id (on that host).
    pub pid: i32,
    /// When that daemon took over (ms UTC).
    pub started_at: Millis,
    /// Its last heartbeat (ms UTC).
    pub heartbeat_at: Millis,
    /// fleet's version on that host.
    pub version: String,
    /// The published config version it applies, if any.
    pub config_version: Option<i64>,
    /// The digest of its LOCAL fleet.toml as it would be published (its `database` password
    /// masked, as in the published text), if reported.
    pub config_digest: Option<String>,
    /// Where its HTTP listener is reachable (`http://addr:port`), if it serves one.
    pub http_addr: Option<String>,
    /// When an operator forgot it, if they did (and it has not taken over since).
    pub forgotten_at: Option<Millis>,
    /// Who forgot it.
    pub forgotten_by: Option<String>,
    /// The caps in force there, as JSON written by the supervisor.
    pub caps_json: String,
    /// The config file it reads.
    pub config_path: String,
    /// The last reload error there, if its newest config was refused.
    pub reload_error: Option<String>,
    /// When its take-over or its last reload was recorded (ms UTC): moves at every reload the
    /// daemon processed, so scripts can wait for an edit to be seen.
    pub updated_at: Millis,
    /// Its active runs (`starting` or `running` with `host` = its name), counted at the read.
    pub active_runs: u64,
    /// How far its clock was ahead of the database's at its last heartbeat (ms; negative: behind),
    /// if it measured it (PostgreSQL only).
    pub clock_offset_ms: Option<Millis>,
    /// Where its daemon runs (PostgreSQL only; absent for a row no daemon of this version wrote).
    pub place: Option<Place>,
    /// When its daemon stopped cleanly, if it did (and none has taken over since): it is silent
    /// at once, and may be taken over from elsewhere (PostgreSQL only).
    pub stopped_at: Option<Millis>,
}

/// Where a host's daemon runs: the machine and the state directory. Two daemons under one host
/// name from two places are two daemons claiming runs whose files only one of them can see; a
/// daemon restarted in the same place is the same host coming back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The machine's node name (`uname -n`), whatever host name the daemon runs under.
    pub machine: String,
    /// The state directory's id: random, made once and kept in the directory.
    pub state_dir_id: String,
}

/// A host's state as `fleet hosts` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostState {
    /// Heartbeat younger than [`SILENCE_MS`].
    Alive,
    /// Heartbeat older: the daemon may be stopped, stuck or cut off. Its runs keep their seats.
    Silent,
    /// An operator forgot it: its runs were ended `lost`, its seats freed.
    Forgotten,
}

impl HostState {
    /// The state as shown and in JSON: `alive`, `silent`, `forgotten`.
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Alive => "alive",
            HostState::Silent => "silent",
            HostState::Forgotten => "forgotten",
        }
    }
}

impl HostRow {
    /// Its state at `now` (ms UTC, by the database's clock on a shared database). A daemon that
    /// stopped cleanly is silent at once: it beats no more.
    pub fn state(&self, now: Millis) -> HostState {
        if self.forgotten_at.is_some() {
            HostState::Forgotten
        } else if self.stopped_at.is_none() && now - self.heartbeat_at < SILENCE_MS {
            HostState::Alive
        } else {
            HostState::Silent
        }
    }
}

/// What a heartbeat records besides its time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostInfo {
    /// The published config version applied (None: not following a published config).
    pub config_version: Option<i64>,
    /// The digest of the host's local fleet.toml as it would be published (its `database`
    /// password masked): never of a text that holds the password.
    pub config_digest: Option<String>,
    /// Its HTTP listener as a URL base, if it serves one.
    pub http_addr: Option<String>,
    /// How far its clock is ahead of the database's, as last measured (ms; negative: behind).
    pub clock_offset_ms: Option<Millis>,
}

/// What [`Store::forget_host`](crate::Store::forget_host) did, in its one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forgotten {
    /// The host's new epoch (held by nobody until it takes over again).
    pub epoch: i64,
    /// The host's active runs, each now `lost`, its seats freed.
    pub lost: Vec<RunId>,
    /// The retries queued for them (new run ids), in the order of `lost`'s runs that got one.
    pub retried: Vec<RunId>,
}

/// The config in force for the whole fleet (one row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// Its version: 1 for the first publish, one more per change.
    pub version: i64,
    /// The digest of `text`, as the publisher computed it.
    pub digest: String,
    /// The fleet.toml text itself, as its host published it (since the password of the
    /// `database` URL is masked in what a host publishes, a text holds one only when an earlier
    /// fleet version published it).
    pub text: String,
    /// When it was published (ms UTC).
    pub published_at: Millis,
    /// The host that published it.
    pub published_by: String,
}

/// The end of a run's log, kept in the database when the run ended, for `fleet logs` on
/// another host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogTail {
    /// The host whose daemon ran it (the full log is there).
    pub host: String,
    /// The last bytes of the log (at most [`LOG_TAIL_BYTES`]).
    pub tail: Vec<u8>,
    /// True when the log was longer than the tail.
    pub cut: bool,
}

impl From<HostRow> for crate::DaemonRow {
    /// The daemon row of a host: what `fleet status` shows of the daemon.
    fn from(h: HostRow) -> crate::DaemonRow {
        crate::DaemonRow {
            host: h.name,
            pid: h.pid,
            epoch: h.epoch,
            started_at: h.started_at,
            config_path: h.config_path,
            caps_json: h.caps_json,
            reload_error: h.reload_error,
            updated_at: h.updated_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost_with(reason: &str) -> Run {
        Run {
            id: 1,
            project: "web".into(),
            namespace: "default".into(),
            status: RunStatus::Lost,
            attempt: 1,
            trigger: crate::Trigger::Schedule,
            occurrence: Some(0),
            priority: 0,
            not_before: 0,
            enqueued_at: 0,
            started_at: Some(0),
            finished_at: Some(1),
            pid: None,
            exit_code: None,
            signal: None,
            reason: Some(reason.into()),
            cancel_requested: false,
            claim_token: 7,
            epoch: Some(1),
            retry_of: None,
            args: Vec::new(),
            env: Vec::new(),
            rerun_of: None,
            hook_of: None,
            seat: 0,
            host: Some("h0".into()),
        }
    }

    /// A forget's end is told from its words, after a note the run had already too.
    #[test]
    fn a_forget_is_told_from_its_words_wherever_they_stand() {
        let forgot = "host h0 was forgotten by an operator; its command may still have run there";
        assert!(ended_by_forget(&lost_with(forgot)));
        let after_a_note = format!("2 earlier occurrence(s) missed and skipped (a .. b); {forgot}");
        assert!(ended_by_forget(&lost_with(&after_a_note)));
        assert!(!ended_by_forget(&lost_with("the shim was killed")));
        let failed = Run {
            status: RunStatus::Failed,
            ..lost_with(forgot)
        };
        assert!(!ended_by_forget(&failed));
    }
}
