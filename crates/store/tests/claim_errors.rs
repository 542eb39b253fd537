//! A claim that fails for any reason but a refused row (the one-active-run-per-project index,
//! another constraint, a trigger's refusal) is an error the caller sees (the EVAL stops and
//! retries later), never a silent skip that reads as "the project already runs": nothing is
//! claimed, and the run stays queued. A refused row leaves that run queued and the others of
//! the batch claimed, on both backends.

use store::*;

mod common;
use common::Db;

fn a_claim_that_fails_otherwise_than_on_the_unique_index_is_an_error(db: &Db) {
    let s = db.store();
    let epoch = s.take_over("local", 1, "fleet.toml", "{}", 0).unwrap();
    let id = s
        .enqueue(
            &NewRun {
                project: "p".into(),
                namespace: "default".into(),
                priority: 0,
                trigger: Trigger::Manual,
                occurrence: None,
                not_before: 0,
                ..Default::default()
            },
            1,
        )
        .unwrap();
    // Another writer left a trigger that fails every claim, as it runs, with an ordinary error
    // (an integer overflow), not a constraint.
    db.exec(
        "CREATE TRIGGER broken BEFORE UPDATE OF status ON runs \
         BEGIN SELECT abs(-9223372036854775807 - 1); END;",
        "CREATE FUNCTION broken() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN PERFORM abs(-9223372036854775807 - 1); RETURN NEW; END $$; \
         CREATE TRIGGER broken BEFORE UPDATE OF status ON runs FOR EACH ROW \
           EXECUTE FUNCTION broken();",
    );
    let req = ClaimRequest {
        run_id: id,
        namespace: "default".into(),
        global_cap: 4,
        namespace_cap: None,
        max_parallel: 1,
        host_cap: None,
        config_version: None,
    };
    let err = s
        .claim(epoch, std::slice::from_ref(&req), 2)
        .expect_err("the failed claim must be reported");
    assert!(!err.is_busy(), "{err}");
    assert_eq!(s.get_run(id).unwrap().status, RunStatus::Queued);
}

/// A claim the database refuses as a row (another program's trigger, or a constraint) leaves
/// that run queued and claims the others of the same batch: no error, so one refused project
/// never stops the claims of every other.
fn a_claim_refused_by_a_trigger_leaves_that_run_queued_and_claims_the_others(db: &Db) {
    let s = db.store();
    let epoch = common::take_over(&s);
    let refused = s
        .enqueue(&common::new_run("refused", "default"), 1)
        .unwrap();
    let other = s.enqueue(&common::new_run("other", "default"), 1).unwrap();
    db.exec(
        "CREATE TRIGGER refuse BEFORE UPDATE OF status ON runs \
           WHEN NEW.project = 'refused' AND NEW.status = 'starting' \
           BEGIN SELECT RAISE(ABORT, 'not this one'); END;",
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN IF NEW.project = 'refused' AND NEW.status = 'starting' THEN \
                RAISE EXCEPTION 'not this one'; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER refuse BEFORE UPDATE OF status ON runs FOR EACH ROW \
           EXECUTE FUNCTION refuse();",
    );
    let mut refusals = Vec::new();
    let claimed = s
        .claim_noting_refusals(
            epoch,
            &[
                common::claim_req(refused, "default"),
                common::claim_req(other, "default"),
            ],
            2,
            &mut refusals,
        )
        .expect("a refused row is not an error of the claim");
    let ids: Vec<RunId> = claimed.iter().map(|c| c.run.id).collect();
    assert_eq!(ids, [other]);
    assert_eq!(s.get_run(refused).unwrap().status, RunStatus::Queued);
    assert_eq!(s.get_run(other).unwrap().status, RunStatus::Starting);
    // The caller learns which, and why, in the database's words.
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0].run_id, refused);
    assert!(refusals[0].reason.contains("not this one"), "{refusals:?}");
}

/// The same for a trigger that drops the claim's write without an error (SQLite's
/// `RAISE(IGNORE)`, a PostgreSQL trigger returning NULL): a refusal, not a run that was simply
/// no longer queued, so that the caller holds it back instead of asking at every EVAL.
fn a_claim_a_trigger_drops_silently_is_reported_as_refused(db: &Db) {
    let s = db.store();
    let epoch = common::take_over(&s);
    let dropped = s
        .enqueue(&common::new_run("dropped", "default"), 1)
        .unwrap();
    db.exec(
        "CREATE TRIGGER drop_claim BEFORE UPDATE OF status ON runs \
           WHEN NEW.project = 'dropped' AND NEW.status = 'starting' \
           BEGIN SELECT RAISE(IGNORE); END;",
        "CREATE FUNCTION drop_claim() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN IF NEW.project = 'dropped' AND NEW.status = 'starting' THEN \
                RETURN NULL; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER drop_claim BEFORE UPDATE OF status ON runs FOR EACH ROW \
           EXECUTE FUNCTION drop_claim();",
    );
    let mut refusals = Vec::new();
    let claimed = s
        .claim_noting_refusals(
            epoch,
            &[common::claim_req(dropped, "default")],
            2,
            &mut refusals,
        )
        .unwrap();
    assert!(claimed.is_empty());
    assert_eq!(s.get_run(dropped).unwrap().status, RunStatus::Queued);
    assert_eq!(
        refusals,
        [ClaimRefusal {
            run_id: dropped,
            reason: "a trigger on runs dropped the claim's write".into()
        }]
    );
    // A run no longer queued is no refusal: nothing to hold back.
    db.exec(
        "DROP TRIGGER drop_claim;",
        "DROP TRIGGER drop_claim ON runs;",
    );
    assert_eq!(
        s.cancel_queued_runs(&[dropped], "not wanted", 3).unwrap(),
        [dropped]
    );
    let mut refusals = Vec::new();
    s.claim_noting_refusals(
        epoch,
        &[common::claim_req(dropped, "default")],
        4,
        &mut refusals,
    )
    .unwrap();
    assert!(refusals.is_empty(), "{refusals:?}");
}

both_backends!(
    a_claim_that_fails_otherwise_than_on_the_unique_index_is_an_error,
    a_claim_refused_by_a_trigger_leaves_that_run_queued_and_claims_the_others,
    a_claim_a_trigger_drops_silently_is_reported_as_refused,
);
