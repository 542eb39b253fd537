//! `/metrics`: the exposition of what the daemon counts in memory as it works
//! ([`Metrics`](super::Metrics), `counters.rs`) together with a snapshot of the database
//! (`render`), in the OpenMetrics text format Prometheus scrapes.
//!
//! Cost of a scrape: the in-memory metrics are encoded as they are; the snapshot is four reads
//! (`Store::ended_totals`, `Store::queue_summary`, `Store::active_runs`, `Store::schedules`),
//! each in proportion to the projects, namespaces, queue, active runs or schedules, never to
//! the history, run on a blocking thread. Readers never wait for the daemon's writes (WAL), so
//! a scrape never holds up an EVAL. Nothing here writes.

use std::collections::BTreeMap;

use config::Config;
use health::Verdict;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use store::{EndedTotal, Millis, QueueSummary, Run, RunStatus, ScheduleRow};

use super::observed::Observed;

/// The content type of the exposition (OpenMetrics 1.0 text, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a scrape reads from the database.
pub(super) struct Snapshot {
    pub(super) ended: Vec<EndedTotal>,
    pub(super) queued: Vec<QueueSummary>,
    pub(super) active: Vec<Run>,
    /// One row per schedule the daemon has started (its cursor and next occurrence).
    pub(super) schedules: Vec<ScheduleRow>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProjectStatus {
    project: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProjectLabel {
    project: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabel {
    namespace: String,
}

/// Statuses that count as a failure for `fleet_project_last_failure_timestamp_seconds`.
fn is_failure(s: RunStatus) -> bool {
    matches!(s, RunStatus::Failed | RunStatus::TimedOut | RunStatus::Lost)
}

/// The whole exposition: the in-memory metrics, then the snapshot `snap` read at `now`
/// ([`Millis`]) under `config` (the config in force: its caps, namespaces and projects).
pub(super) fn render(observed: &Observed, config: &Config, snap: &Snapshot, now: Millis) -> String {
    let mut reg = Registry::with_prefix("fleet");
    let secs = |ms: Millis| ms as f64 / 1000.0;

    let ended = Family::<ProjectStatus, Counter>::default();
    let last_success = Family::<ProjectLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let last_failure = Family::<ProjectLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let mut failure_at: BTreeMap<&str, Millis> = BTreeMap::new();
    // The database keeps the totals of projects since removed or renamed; exposing them would
    // keep a per-project alert (no success in 24h) firing forever, so only the projects of the
    // config in force are shown, and a reload that removes one drops its series.
    for t in snap
        .ended
        .iter()
        .filter(|t| config.projects.contains_key(&t.project))
    {
        ended
            .get_or_create(&ProjectStatus {
                project: t.project.clone(),
                status: t.status.as_str().to_string(),
            })
            .inc_by(t.count);
        let Some(at) = t.last_finished_at else {
            continue;
        };
        if t.status == RunStatus::Succeeded {
            last_success
                .get_or_create(&ProjectLabel {
                    project: t.project.clone(),
                })
                .set(secs(at));
        } else if is_failure(t.status) {
            let e = failure_at.entry(&t.project).or_insert(at);
            *e = (*e).max(at);
        }
    }
    for (project, at) in failure_at {
        last_failure
            .get_or_create(&ProjectLabel {
                project: project.to_string(),
            })
            .set(secs(at));
    }
    reg.register(
        "runs_ended",
        "Runs that reached a terminal status, by project and status (kept in the database: survives restarts and pruning)",
        ended,
    );
    reg.register_with_unit(
        "project_last_success_timestamp",
        "When a run of the project last succeeded (Unix time); absent until one has",
        Unit::Seconds,
        last_success,
    );
    reg.register_with_unit(
        "project_last_failure_timestamp",
        "When a run of the project last ended failed, timed_out or lost (Unix time); absent until one has",
        Unit::Seconds,
        last_failure,
    );

    // Every namespace the config declares or a run counts against, so that an empty one reads 0.
    // (active, queued, oldest queued at, oldest ready since)
    type NsRow = (i64, i64, Option<Millis>, Option<Millis>);
    let mut namespaces: BTreeMap<String, NsRow> = config
        .namespaces
        .keys()
        .map(|n| (n.clone(), (0, 0, None, None)))
        .collect();
    namespaces
        .entry(config::DEFAULT_NAMESPACE.to_string())
        .or_default();
    for r in &snap.active {
        namespaces.entry(r.namespace.clone()).or_default().0 += 1;
    }
    for q in &snap.queued {
        let e = namespaces.entry(q.namespace.clone()).or_default();
        e.1 = i64::try_from(q.queued).unwrap_or(i64::MAX);
        e.2 = Some(q.oldest_enqueued_at);
        e.3 = q.oldest_ready_at;
    }
    let ns_active = Family::<NamespaceLabel, Gauge>::default();
    let ns_cap = Family::<NamespaceLabel, Gauge>::default();
    let ns_queued = Family::<NamespaceLabel, Gauge>::default();
    let ns_oldest = Family::<NamespaceLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let ns_ready = Family::<NamespaceLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    for (name, (active, queued, oldest, ready)) in &namespaces {
        let l = NamespaceLabel {
            namespace: name.clone(),
        };
        ns_active.get_or_create(&l).set(*active);
        ns_queued.get_or_create(&l).set(*queued);
        ns_oldest
            .get_or_create(&l)
            .set(oldest.map_or(0.0, |at| secs(now.saturating_sub(at).max(0))));
        ns_ready
            .get_or_create(&l)
            .set(ready.map_or(0.0, |at| secs(now.saturating_sub(at).max(0))));
        if let Some(ns) = config.namespaces.get(name) {
            ns_cap
                .get_or_create(&l)
                .set(i64::try_from(ns.max_concurrency).unwrap_or(i64::MAX));
        }
    }
    reg.register(
        "namespace_active_runs",
        "Active (starting or running) runs counted against the namespace",
        ns_active,
    );
    reg.register(
        "namespace_max_concurrency",
        "The namespace's cap (declared namespaces only)",
        ns_cap,
    );
    reg.register(
        "namespace_queued_runs",
        "Queued runs in the namespace (delayed retries included)",
        ns_queued,
    );
    reg.register_with_unit(
        "namespace_oldest_queued_age",
        "Age of the namespace's oldest queued run (delayed retries included); 0 when none is queued",
        Unit::Seconds,
        ns_oldest,
    );
    // What a stale-queue alert wants: a delayed retry waiting out its backoff is not stuck, so
    // only runs ready to start count, and from when they became ready.
    reg.register_with_unit(
        "namespace_oldest_ready_age",
        "How long the namespace's oldest ready queued run (not_before reached) has been ready; 0 when none is ready",
        Unit::Seconds,
        ns_ready,
    );
    schedules(&mut reg, config, &snap.schedules, now);
    let gauge = |v: i64| {
        let g: Gauge = Gauge::default();
        g.set(v);
        g
    };
    let fgauge = |v: f64| {
        let g = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        g.set(v);
        g
    };
    reg.register(
        "active_runs",
        "Active (starting or running) runs, all namespaces",
        gauge(snap.active.len() as i64),
    );
    reg.register(
        "max_concurrency",
        "The global cap on active runs",
        gauge(i64::try_from(config.max_concurrency).unwrap_or(i64::MAX)),
    );
    reg.register(
        "daemon_epoch",
        "The daemon's epoch (grows by one at each takeover of the state directory)",
        gauge(observed.epoch),
    );
    reg.register_with_unit(
        "daemon_start_time",
        "When the daemon started (Unix time)",
        Unit::Seconds,
        fgauge(secs(observed.health.started_at())),
    );
    if let Some(at) = observed.health.last_turn() {
        reg.register_with_unit(
            "daemon_last_turn_timestamp",
            "When the daemon's loop last completed an EVAL or an idle tick (Unix time)",
            Unit::Seconds,
            fgauge(secs(at)),
        );
    }
    // Many hosts: this host's clock against the database's, which the daemon follows.
    if let Some(offset) = store::db_clock::offset_ms() {
        reg.register_with_unit(
            "clock_offset",
            "How far this host's clock is ahead of the shared database's (negative: behind), as last measured; fleet judges time by the database's clock, and says so past 2 s either way",
            Unit::Seconds,
            fgauge(offset as f64 / 1000.0),
        );
    }
    let healthy = matches!(observed.health.verdict(now), Verdict::Evaluating { .. });
    reg.register(
        "daemon_healthy",
        "1 when the loop completed a turn within three ticks (what /healthz says), else 0",
        gauge(i64::from(healthy)),
    );

    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode_registry(&mut out, &observed.metrics.registry);
    let _ = encode_registry(&mut out, &reg);
    let _ = encode_eof(&mut out);
    out
}

/// The schedules' series, for the projects the config in force schedules: the row of a
/// schedule removed from the file stays in the database with its last `next_fire`, and would
/// look overdue forever.
///
/// Why: a schedule whose runs the database refuses waits alone while everything else goes on
/// (the daemon stays healthy), so an alert needs a series of its own to fire on.
fn schedules(reg: &mut Registry, config: &Config, rows: &[ScheduleRow], now: Millis) {
    let overdue = Family::<ProjectLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let skipped = Family::<ProjectLabel, Counter>::default();
    let scheduled = |project: &str| {
        config
            .projects
            .get(project)
            .is_some_and(|p| p.schedule.is_some())
    };
    for r in rows.iter().filter(|r| scheduled(&r.project)) {
        let label = ProjectLabel {
            project: r.project.clone(),
        };
        let past = r.next_fire.map_or(0, |next| (now - next).max(0));
        overdue.get_or_create(&label).set(past as f64 / 1000.0);
        skipped
            .get_or_create(&label)
            .inc_by(u64::try_from(r.skipped_total).unwrap_or(0));
    }
    reg.register_with_unit(
        "schedule_overdue",
        "How long the schedule's next occurrence has been past its time and still unhandled (0 until it is due; a working daemon handles it within milliseconds)",
        Unit::Seconds,
        overdue,
    );
    reg.register(
        "schedule_skipped_occurrences",
        "Occurrences the schedule skipped (missed while no daemon ran, late, overlapping, or paused), over the life of its timetable (kept in the database)",
        skipped,
    );
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use store::{EndedTotal, Millis, QueueSummary, RunStatus, ScheduleRow, Store};

    use super::{render, Snapshot};
    use crate::Observed;
    use config::Config;
    use health::Health;

    /// Prometheus naming: every family has the `fleet_` prefix, counters are exposed as
    /// `_total`, a family with a unit ends with it, and the exposition ends with `# EOF`.
    #[test]
    fn names_follow_prometheus_conventions() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("fleet.db"), Duration::from_secs(1)).unwrap();
        let config = Config::parse(
            "[namespaces.ops]\nmax_concurrency = 2\n[projects.p]\ncommand = [\"true\"]\nnamespace = \"ops\"\n\
             [projects.late]\ncommand = [\"true\"]\nschedule = \"* * * * *\"\n\
             [projects.early]\ncommand = [\"true\"]\nschedule = \"* * * * *\"\n",
            Path::new("fleet.toml"),
        )
        .unwrap();
        let health = Arc::new(Health::new(Duration::from_secs(1), 1_000));
        health.turn(2_000);
        let o = Observed::new(
            health,
            7,
            store,
            dir.path().to_path_buf(),
            Arc::new(config.clone()),
        );
        let snap = Snapshot {
            ended: vec![
                EndedTotal {
                    project: "p".into(),
                    status: RunStatus::Succeeded,
                    count: 3,
                    last_finished_at: Some(1_500),
                },
                EndedTotal {
                    project: "p".into(),
                    status: RunStatus::Lost,
                    count: 1,
                    last_finished_at: Some(1_700),
                },
                // A project no longer in the config: none of its series is exposed.
                EndedTotal {
                    project: "gone".into(),
                    status: RunStatus::Succeeded,
                    count: 1,
                    last_finished_at: Some(1_600),
                },
            ],
            queued: vec![QueueSummary {
                namespace: "ops".into(),
                queued: 4,
                oldest_enqueued_at: 1_000,
                oldest_ready_at: Some(2_500),
            }],
            active: vec![],
            schedules: vec![
                schedule("late", Some(1_000), 2),
                schedule("early", Some(4_000), 0),
                // Unscheduled since (`p` has no schedule), or gone from the config: its row
                // stays with its last occurrence, which would look overdue forever.
                schedule("p", Some(1_000), 0),
                schedule("gone", Some(1_000), 0),
            ],
        };
        o.metrics.refused_transitions(2);
        o.metrics.refused_claims(3);
        let text = render(&o, &config, &snap, 3_000);
        assert!(!text.contains("\"gone\""), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let mut kind = std::collections::BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, t) = rest.split_once(' ').unwrap();
                assert!(name.starts_with("fleet_"), "{line}");
                kind.insert(name.to_string(), t.to_string());
            } else if let Some(rest) = line.strip_prefix("# UNIT ") {
                let (name, unit) = rest.split_once(' ').unwrap();
                assert!(name.ends_with(&format!("_{unit}")), "{line}");
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let counter = kind
                    .iter()
                    .any(|(f, t)| t == "counter" && name == format!("{f}_total"));
                let other = kind
                    .iter()
                    .any(|(f, t)| t != "counter" && name.starts_with(f.as_str()));
                assert!(counter || other, "sample of no family: {line}");
            }
        }
        for line in [
            "fleet_runs_ended_total{project=\"p\",status=\"succeeded\"} 3",
            "fleet_runs_ended_total{project=\"p\",status=\"lost\"} 1",
            "fleet_project_last_success_timestamp_seconds{project=\"p\"} 1.5",
            "fleet_project_last_failure_timestamp_seconds{project=\"p\"} 1.7",
            "fleet_namespace_queued_runs{namespace=\"ops\"} 4",
            "fleet_namespace_oldest_queued_age_seconds{namespace=\"ops\"} 2.0",
            "fleet_namespace_oldest_ready_age_seconds{namespace=\"ops\"} 0.5",
            "fleet_namespace_max_concurrency{namespace=\"ops\"} 2",
            "fleet_daemon_epoch 7",
            "fleet_daemon_healthy 1",
            "fleet_refused_transitions 2",
            "fleet_refused_claims 3",
            "fleet_schedule_overdue_seconds{project=\"late\"} 2.0",
            "fleet_schedule_overdue_seconds{project=\"early\"} 0.0",
            "fleet_schedule_skipped_occurrences_total{project=\"late\"} 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        for project in ["p", "gone"] {
            assert!(
                !text.contains(&format!(
                    "fleet_schedule_overdue_seconds{{project=\"{project}\"}}"
                )),
                "{text}"
            );
        }
    }

    fn schedule(project: &str, next_fire: Option<Millis>, skipped_total: i64) -> ScheduleRow {
        ScheduleRow {
            project: project.into(),
            timetable: "* * * * * UTC".into(),
            cursor: 0,
            next_fire,
            skipped_total,
            last_skipped: None,
            clock_back: None,
        }
    }
}
