//! A claim the database refuses for any reason but the one-active-run-per-project index is an
//! error the caller sees (the EVAL stops and retries later), never a silent skip that reads as
//! "the project already runs". Nothing is claimed, and the run stays queued.

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

both_backends!(a_claim_that_fails_otherwise_than_on_the_unique_index_is_an_error);
