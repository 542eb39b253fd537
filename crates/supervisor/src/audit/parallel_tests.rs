//! `fleet check` counts a project's active runs up to its `max_parallel`.

use super::*;

/// Three active runs of a project with `max_parallel = 3` are fine; the same runs checked
/// without the config (every project held to one) are reported as `two_active_runs`.
#[test]
fn active_runs_are_counted_up_to_max_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::new(dir.path());
    let store = state.open_store().unwrap();
    let epoch = store.take_over("local", 1, "fleet.toml", "{}", 0).unwrap();
    let requests: Vec<store::ClaimRequest> = (0..3)
        .map(|i| {
            let id = store
                .enqueue(
                    &store::NewRun {
                        project: "p".into(),
                        namespace: "default".into(),
                        trigger: store::Trigger::Manual,
                        ..Default::default()
                    },
                    i,
                )
                .unwrap();
            store::ClaimRequest {
                run_id: id,
                namespace: "default".into(),
                global_cap: 4,
                namespace_cap: None,
                max_parallel: 3,
                host_cap: None,
                config_version: None,
            }
        })
        .collect();
    let claimed_at = 1_000;
    assert_eq!(store.claim(epoch, &requests, claimed_at).unwrap().len(), 3);
    let config = Config::parse(
        "[projects.p]\ncommand = [\"true\"]\nmax_parallel = 3\n",
        Path::new("fleet.toml"),
    )
    .unwrap();
    let too_many = |config: Option<&Config>| {
        // Within the grace of a fresh claim: no shim is expected yet.
        audit(&state, &store, claimed_at + 1, config)
            .unwrap()
            .violations
            .into_iter()
            .filter(|v| v.kind == ViolationKind::TwoActiveRuns)
            .collect::<Vec<_>>()
    };
    assert!(too_many(Some(&config)).is_empty());
    let found = too_many(None);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].message.contains("more than its max_parallel of 1"),
        "{found:?}"
    );
}
