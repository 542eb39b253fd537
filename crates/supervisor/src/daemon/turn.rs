//! The loop's record of a completed turn (an EVAL, or an idle tick): the heartbeat, and what
//! the service manager is told then ([`super::notify`] says what and when).

use sd_notify::NotifyState;
use store::RunStatus;
use tokio::time::Instant;

use super::notify::STATUS_EVERY;
use super::state::Reporting;
use crate::slots::SlotPool;

/// The loop completed a turn (an EVAL, or an idle tick): records it in the heartbeat, and
/// tells the service manager what is due (see the module's documentation).
pub(super) async fn turn(report: &mut Reporting, slots: &SlotPool, store: &store::Store) {
    report.health.turn(store::now_ms());
    report.published_slots.publish(slots);
    if !report.notifier.enabled {
        return;
    }
    let now = Instant::now();
    let ready = !report.notifier.ready;
    let ping = report.notifier.ping_every.is_some_and(|every| {
        report
            .notifier
            .last_ping
            .is_none_or(|at| now.duration_since(at) >= every)
    });
    let status = if ready
        || report
            .notifier
            .last_status
            .is_none_or(|at| now.duration_since(at) >= STATUS_EVERY)
    {
        status_line(store).await
    } else {
        None
    };
    let mut states = Vec::new();
    if ready {
        states.push(NotifyState::Ready);
        report.notifier.ready = true;
    }
    if ping {
        states.push(NotifyState::Watchdog);
        report.notifier.last_ping = Some(now);
    }
    if let Some(line) = &status {
        states.push(NotifyState::Status(line));
        report.notifier.last_status = Some(now);
    }
    report.notifier.send(&states);
}

/// `N active, M queued`, counted in the database; `None` if it cannot be read now (the
/// summary waits for the next turn).
async fn status_line(store: &store::Store) -> Option<String> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || {
        let active =
            store.count_runs(RunStatus::Starting)? + store.count_runs(RunStatus::Running)?;
        let queued = store.count_runs(RunStatus::Queued)?;
        Ok::<_, store::StoreError>(format!("{active} active, {queued} queued"))
    })
    .await
    .ok()?
    .ok()
}
