//! The backend-neutral rules of many hosts: whether an epoch may still write ([`fence`]),
//! whether a host may be forgotten ([`may_forget`]), what forgetting a host does to each of
//! its active runs ([`lost_by_forget`]), and whether a daemon may take a host name over from
//! where it runs ([`may_take_over`]).
//!
//! A backend reads the facts (the global counter, the host row holding the epoch, whether the
//! epoch was forgotten) inside the writing transaction and asks here; it must not decide
//! fencing on its own. Nothing here may read or write.

use crate::error::Result;
use crate::{
    Applied, Change, Forgotten, Millis, Place, Run, RunStatus, StoreError, Transition, SILENCE_MS,
};

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

/// What a take-over's transaction read of the host row it is about to take (locked).
pub(crate) struct Holder {
    /// Where the daemon that holds the row runs, if it said.
    pub(crate) place: Option<Place>,
    /// That daemon's pid.
    pub(crate) pid: i32,
    /// Its last heartbeat (ms UTC).
    pub(crate) heartbeat_at: Millis,
    /// Whether it was forgotten, or stopped cleanly, since.
    pub(crate) gone: bool,
}

/// Whether a daemon running at `ours` may take host `name` over, given the row's `holder` (if
/// the host is known) and the database's time `now`. Refused ([`StoreError::HostAlive`]) only
/// when the holder runs in another place and is alive: not forgotten, not stopped, its
/// heartbeat younger than [`SILENCE_MS`]. The same place is the same daemon coming back (a
/// crash and a restart within the bound take over as ever); an unknown place on either side
/// (a row an older version wrote, a caller that does not say) decides nothing.
pub(crate) fn may_take_over(
    name: &str,
    ours: Option<&Place>,
    holder: Option<Holder>,
    now: Millis,
) -> Result<()> {
    let Some(h) = holder else { return Ok(()) };
    let (Some(ours), Some(theirs)) = (ours, h.place) else {
        return Ok(());
    };
    let age = now - h.heartbeat_at;
    if theirs == *ours || h.gone || age >= SILENCE_MS {
        return Ok(());
    }
    Err(StoreError::HostAlive {
        host: name.to_string(),
        same_machine: theirs.machine == ours.machine,
        machine: theirs.machine,
        pid: h.pid,
        age_ms: age.max(0),
    })
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
    fn a_live_host_is_taken_over_only_from_its_own_place() {
        let place = |m: &str, d: &str| Place {
            machine: m.into(),
            state_dir_id: d.into(),
        };
        let here = place("m1", "d1");
        let holder = |p: Place, beat: Millis, gone: bool| Holder {
            place: Some(p),
            pid: 7,
            heartbeat_at: beat,
            gone,
        };
        let now = 100_000;
        // Unknown host, the same place, or a holder that is silent, forgotten or stopped.
        assert!(may_take_over("a", Some(&here), None, now).is_ok());
        assert!(may_take_over(
            "a",
            Some(&here),
            Some(holder(here.clone(), now, false)),
            now
        )
        .is_ok());
        let old = now - SILENCE_MS;
        assert!(may_take_over(
            "a",
            Some(&here),
            Some(holder(place("m2", "d1"), old, false)),
            now
        )
        .is_ok());
        assert!(may_take_over(
            "a",
            Some(&here),
            Some(holder(place("m2", "d1"), now, true)),
            now
        )
        .is_ok());
        assert!(may_take_over("a", None, Some(holder(place("m2", "d1"), now, false)), now).is_ok());
        // Alive elsewhere: another machine, or another state directory on this one.
        for other in [place("m2", "d1"), place("m1", "d2")] {
            let e = may_take_over(
                "a",
                Some(&here),
                Some(holder(other, now - 1_500, false)),
                now,
            )
            .unwrap_err();
            let StoreError::HostAlive {
                host, pid, age_ms, ..
            } = &e
            else {
                panic!("{e}");
            };
            assert_eq!((host.as_str(), *pid, *age_ms), ("a", 7, 1_500));
            let said = e.to_string();
            for part in [
                "host a is alive on machine",
                "pid 7",
                "--host",
                "stop that daemon",
                "fleet hosts forget a",
            ] {
                assert!(said.contains(part), "{said}");
            }
        }
    }

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
