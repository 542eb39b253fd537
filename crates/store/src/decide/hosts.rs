//! The backend-neutral rules of many hosts: whether an epoch may still write ([`fence`]),
//! whether a host may be forgotten ([`may_forget`]), and what forgetting a host does to each of
//! its active runs ([`lost_by_forget`]).
//!
//! A backend reads the facts (the global counter, the host row holding the epoch, whether the
//! epoch was forgotten) inside the writing transaction and asks here; it must not decide
//! fencing on its own. Nothing here may read or write.

use crate::error::Result;
use crate::{Applied, Change, Forgotten, Millis, Run, RunStatus, StoreError, Transition};

/// The columns of a `hosts` row, in the order each backend's host mapping reads them, with the
/// host's active runs counted last.
pub(crate) const HOST_COLUMNS: &str =
    "name, epoch, pid, started_at, heartbeat_at, version, config_version, config_digest, \
     http_addr, forgotten_at, forgotten_by, caps_json, config_path, reload_error, updated_at, \
     (SELECT count(*) FROM runs r WHERE r.host = hosts.name \
        AND r.status IN ('starting','running'))";

/// fleet's version, recorded in a host's row at its take-over (the workspace shares one).
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the writing transaction read about epoch `ours`.
pub(crate) struct EpochFacts {
    /// The global counter (the newest epoch handed out).
    pub(crate) current: i64,
    /// The name of the host whose row holds `ours` and is not forgotten, if one does.
    pub(crate) holder: Option<String>,
    /// True when a forget took `ours` from its host (and that host has not taken over since).
    pub(crate) forgotten: bool,
}

/// The host name epoch `ours` writes for, or the refusal: [`StoreError::Fenced`] unless a host
/// row holds `ours` and is not forgotten. Two hosts with different names never fence each
/// other (each holds its own epoch); a take-over of the same host moves its row to a new epoch,
/// and a forget does too, setting `forgotten`.
pub(crate) fn fence(ours: i64, facts: EpochFacts) -> Result<String> {
    match facts.holder {
        Some(host) => Ok(host),
        None => Err(StoreError::Fenced {
            ours,
            current: facts.current,
            forgotten: facts.forgotten,
        }),
    }
}

/// Whether host `name` may be forgotten, from its row as the forget's transaction read it:
/// `None` when there is none, else when and by whom it was forgotten, if it is. An unknown
/// host is [`StoreError::UnknownHost`]; one already forgotten (and not back since) is
/// [`StoreError::AlreadyForgotten`], and nothing is written, so that its epoch and who forgot
/// it stay as the first forget left them.
pub(crate) fn may_forget(name: &str, row: Option<(Option<Millis>, Option<String>)>) -> Result<()> {
    match row {
        None => Err(StoreError::UnknownHost(name.to_string())),
        Some((Some(at), by)) => Err(StoreError::AlreadyForgotten {
            host: name.to_string(),
            at,
            by: by.unwrap_or_default(),
        }),
        Some((None, _)) => Ok(()),
    }
}

/// The transition that ends `run` (active, on a forgotten host) as `lost`, with the retry the
/// caller's policy chose (`retry`: not before that instant). Applied through the one transition
/// path, so its seats are freed exactly once, by this end.
fn lost_by_forget(run: &Run, host: &str, retry: Option<Millis>) -> Transition {
    Transition {
        run_id: run.id,
        token: run.claim_token,
        change: Change::Finish {
            status: RunStatus::Lost,
            exit_code: None,
            signal: None,
            reason: Some(format!(
                "host {host} {}; its command may still have run there",
                crate::hosts::FORGOTTEN_REASON
            )),
            retry,
            finished_at: None,
        },
    }
}

/// Ends each of `runs` (the forgotten `host`'s active runs, read and locked in the forget's
/// transaction) `lost` with the retry `plan` chooses, through `apply` (the backend's one
/// transition path, in that transaction); `epoch` is the host's new one. Returns what was done.
pub(crate) fn forget_runs(
    runs: &[Run],
    host: &str,
    epoch: i64,
    plan: &dyn Fn(&Run) -> Option<Millis>,
    mut apply: impl FnMut(&Transition) -> Result<Applied>,
) -> Result<Forgotten> {
    let mut out = Forgotten {
        epoch,
        lost: Vec::new(),
        retried: Vec::new(),
    };
    for run in runs {
        if let Applied::Done { retry, .. } = apply(&lost_by_forget(run, host, plan(run)))? {
            out.lost.push(run.id);
            out.retried.extend(retry);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_held_epoch_writes() {
        let held = EpochFacts {
            current: 9,
            holder: Some("a".into()),
            forgotten: false,
        };
        assert_eq!(fence(3, held).unwrap(), "a");
        let gone = EpochFacts {
            current: 9,
            holder: None,
            forgotten: true,
        };
        assert!(matches!(
            fence(3, gone),
            Err(StoreError::Fenced {
                forgotten: true,
                ..
            })
        ));
    }
}
