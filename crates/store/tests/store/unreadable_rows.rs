//! Rows another program wrote with a value fleet cannot read (arguments that are not JSON, a
//! number out of range): the reads that go on past them set them apart with what names them and
//! counts their seats, the reads that need every row say which row stopped them, and a write to
//! such a row is a refusal of that row alone — on both backends.

use store::*;

use crate::common;
use crate::common::Db;

/// Three runs claimed, then two of their rows broken: `args` that are not JSON, an `attempt`
/// out of range. Returns (store, epoch, [args-broken, readable, attempt-broken]).
fn three_active_two_broken(db: &Db) -> (Store, i64, [Run; 3]) {
    let s = db.store();
    let epoch = common::take_over(&s);
    let ids: Vec<RunId> = ["a", "b", "c"]
        .iter()
        .map(|p| s.enqueue(&common::new_run(p, "default"), 1).unwrap())
        .collect();
    let requests: Vec<ClaimRequest> = ids
        .iter()
        .map(|&id| common::claim_req(id, "default"))
        .collect();
    let mut refused = Vec::new();
    let claimed = s
        .claim_noting_refusals(epoch, &requests, 2, &mut refused)
        .unwrap();
    assert_eq!(claimed.len(), 3, "{refused:?}");
    let runs: Vec<Run> = claimed.into_iter().map(|c| c.run).collect();
    let broken = [
        format!(
            "UPDATE runs SET args = 'not json' WHERE id = {};",
            runs[0].id
        ),
        format!(
            "UPDATE runs SET attempt = 5000000000 WHERE id = {};",
            runs[2].id
        ),
    ];
    for sql in &broken {
        db.exec(sql, sql);
    }
    (
        s,
        epoch,
        [runs[0].clone(), runs[1].clone(), runs[2].clone()],
    )
}

fn active_and_listed_rows_fleet_cannot_read_are_set_apart(db: &Db) {
    let (s, _, [args, fine, attempt]) = three_active_two_broken(db);

    let active = s.active_rows().unwrap();
    assert_eq!(
        active.runs.iter().map(|r| r.id).collect::<Vec<_>>(),
        [fine.id]
    );
    let bad: Vec<&UnreadableRun> = active.unreadable.iter().collect();
    assert_eq!(bad.len(), 2, "{bad:?}");
    for (row, run, column) in [(bad[0], &args, "args"), (bad[1], &attempt, "attempt")] {
        // What names it and counts its seat is read all the same.
        assert_eq!(row.id, run.id);
        assert_eq!(row.project, run.project);
        assert_eq!(row.namespace, "default");
        assert_eq!(row.claim_token, run.claim_token);
        assert_eq!(row.host, run.host);
        assert!(
            row.error
                .contains(&format!("run {}: column {column} holds", run.id)),
            "{row:?}"
        );
    }
    let on_host = s.active_rows_on(fine.host.as_deref().unwrap()).unwrap();
    assert_eq!(on_host, active);

    // Newest first, the two broken rows apart.
    let listed = s.list_rows(&RunFilter::default()).unwrap();
    assert_eq!(
        listed.runs.iter().map(|r| r.id).collect::<Vec<_>>(),
        [fine.id]
    );
    assert_eq!(
        listed.unreadable.iter().map(|r| r.id).collect::<Vec<_>>(),
        [attempt.id, args.id]
    );

    // A read of every row names the first it could not read.
    for err in [
        s.active_runs().unwrap_err(),
        s.list_runs(&RunFilter::default()).unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::UnreadableRow { .. }), "{err:?}");
        assert!(err.to_string().contains("column"), "{err}");
    }
}

fn a_transition_of_a_row_fleet_cannot_read_is_refused_alone(db: &Db) {
    let (s, epoch, [args, fine, attempt]) = three_active_two_broken(db);
    for broken in [&args, &attempt] {
        let err = s.apply(epoch, &[common::succeeded(broken)], 3).unwrap_err();
        assert!(
            err.is_refused_row(),
            "run {}: the row's own problem, not the database's: {err:?}",
            broken.id
        );
    }
    // The same write to a readable row goes through.
    let applied = s.apply(epoch, &[common::succeeded(&fine)], 3).unwrap();
    assert!(
        matches!(
            applied[0],
            Applied::Done {
                status: RunStatus::Succeeded,
                ..
            }
        ),
        "{applied:?}"
    );
}

both_backends!(
    active_and_listed_rows_fleet_cannot_read_are_set_apart,
    a_transition_of_a_row_fleet_cannot_read_is_refused_alone,
);
