//! A claim that fails for any reason but a refused row (the one-active-run-per-project index,
//! another constraint, a trigger's refusal) is an error the caller sees (the EVAL stops and
//! retries later), never a silent skip that reads as "the project already runs": nothing is
//! claimed, and the run stays queued. A refused row leaves that run queued and the others of
//! the batch claimed, on both backends.

use store::*;

use crate::common;
use crate::common::Db;

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
    only_the_refused_run_stays_queued(
        db,
        "CREATE TRIGGER refuse BEFORE UPDATE OF status ON runs \
           WHEN NEW.project = 'refused' AND NEW.status = 'starting' \
           BEGIN SELECT RAISE(ABORT, 'not this one'); END;",
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN IF NEW.project = 'refused' AND NEW.status = 'starting' THEN \
                RAISE EXCEPTION 'not this one'; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER refuse BEFORE UPDATE OF status ON runs FOR EACH ROW \
           EXECUTE FUNCTION refuse();",
        "not this one",
    );
}

/// Queues a run of project `refused` and one of `other`, puts another program's trigger in
/// place (`sqlite` or `postgres`, by backend), and claims both in one batch: only `other`'s is
/// claimed, with no error, and `refused`'s is reported with `words` in its reason, its row
/// queued as if no claim had been tried. Returns the store, its epoch, the refused run's id and
/// the claimed run.
fn only_the_refused_run_stays_queued(
    db: &Db,
    sqlite: &str,
    postgres: &str,
    words: &str,
) -> (Store, i64, RunId, Run) {
    let s = db.store();
    let epoch = common::take_over(&s);
    let refused = s
        .enqueue(&common::new_run("refused", "default"), 1)
        .unwrap();
    let other = s.enqueue(&common::new_run("other", "default"), 1).unwrap();
    db.exec(sqlite, postgres);
    let mut refusals = Vec::new();
    let mut claimed = s
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
    let left = s.get_run(refused).unwrap();
    assert_eq!(left.status, RunStatus::Queued);
    assert_eq!((left.claim_token, left.started_at), (0, None), "{left:?}");
    assert_eq!(s.get_run(other).unwrap().status, RunStatus::Starting);
    // The caller learns which, and why, in the database's words.
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0].run_id, refused);
    assert!(refusals[0].reason.contains(words), "{refusals:?}");
    let other = claimed.remove(0).run;
    (s, epoch, refused, other)
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

/// A claim whose *event* the database refuses (a trigger on `events`, after the claim's write
/// went through) is undone alone: that run stays queued, with no claim left half written, and
/// the other claims of the batch go on. Failing the transaction instead would fail every claim
/// of every EVAL, for every project.
fn a_claim_whose_event_is_refused_is_undone_alone(db: &Db) {
    let (s, epoch, refused, other) = only_the_refused_run_stays_queued(
        db,
        "CREATE TRIGGER refuse_event BEFORE INSERT ON events \
           WHEN NEW.project = 'refused' AND NEW.to_status = 'starting' \
           BEGIN SELECT RAISE(ABORT, 'no event for this one'); END;",
        "CREATE FUNCTION refuse_event() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN IF NEW.project = 'refused' AND NEW.to_status = 'starting' THEN \
                RAISE EXCEPTION 'no event for this one'; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER refuse_event BEFORE INSERT ON events FOR EACH ROW \
           EXECUTE FUNCTION refuse_event();",
        "no event for this one",
    );
    // Asked again once the trigger is gone, it is claimed.
    db.exec(
        "DROP TRIGGER refuse_event;",
        "DROP TRIGGER refuse_event ON events;",
    );
    s.apply(epoch, &[common::succeeded(&other)], 3).unwrap();
    let again = s
        .claim(epoch, &[common::claim_req(refused, "default")], 4)
        .unwrap();
    assert_eq!(again.len(), 1);
}

/// A trigger that ends the whole transaction (SQLite's `RAISE(ROLLBACK)`) leaves nothing to
/// undo claim by claim: the claim fails as a whole, and nothing after it is written outside a
/// transaction, one claim at a time.
fn a_claim_whose_transaction_a_trigger_ends_fails_whole(db: &Db) {
    if db.is_postgres() {
        // A PostgreSQL trigger cannot end the transaction it runs in.
        return;
    }
    // On the claim's own write, and on its event.
    for (table, event, when) in [
        (
            "runs",
            "UPDATE OF status",
            "NEW.project = 'refused' AND NEW.status = 'starting'",
        ),
        (
            "events",
            "INSERT",
            "NEW.project = 'refused' AND NEW.to_status = 'starting'",
        ),
    ] {
        let s = db.store();
        let epoch = common::take_over(&s);
        let first = s.enqueue(&common::new_run("first", "default"), 1).unwrap();
        let refused = s
            .enqueue(&common::new_run("refused", "default"), 1)
            .unwrap();
        let last = s.enqueue(&common::new_run("last", "default"), 1).unwrap();
        db.exec(
            &format!(
                "CREATE TRIGGER end_all BEFORE {event} ON {table} WHEN {when} \
                 BEGIN SELECT RAISE(ROLLBACK, 'not at all'); END;"
            ),
            "",
        );
        let mut refusals = Vec::new();
        let err = s
            .claim_noting_refusals(
                epoch,
                &[
                    common::claim_req(first, "default"),
                    common::claim_req(refused, "default"),
                    common::claim_req(last, "default"),
                ],
                2,
                &mut refusals,
            )
            .expect_err("a transaction ended by a trigger fails the claim");
        assert!(err.to_string().contains("not at all"), "{table}: {err}");
        for id in [first, refused, last] {
            assert_eq!(
                s.get_run(id).unwrap().status,
                RunStatus::Queued,
                "{table}: run {id}"
            );
        }
        db.exec("DROP TRIGGER end_all;", "");
        s.cancel_queued_runs(&[first, refused, last], "done", 3)
            .unwrap();
    }
}

/// A run another program set back to `queued` while a claim of it was active: on PostgreSQL
/// it still holds that claim's seats (nothing ended the claim, so nothing freed them), and a
/// second set is refused by the index on seats. That is a refusal of this run alone: the
/// other claims of the batch go on, where an error would stop every claim of every host that
/// packs it. On SQLite, whose seats are the rows themselves, the run is claimed again (its
/// shim then finds the first claim's start in the run's files and refuses to start it).
fn a_run_set_back_to_queued_under_its_claim_stops_no_other_claim(db: &Db) {
    let s = db.store();
    let epoch = common::take_over(&s);
    let moved = s.enqueue(&common::new_run("moved", "default"), 1).unwrap();
    let first = s
        .claim(epoch, &[common::claim_req(moved, "default")], 2)
        .unwrap();
    assert_eq!(first.len(), 1);
    db.exec(
        "UPDATE runs SET status = 'queued' WHERE project = 'moved';",
        "UPDATE runs SET status = 'queued' WHERE project = 'moved';",
    );
    let other = s.enqueue(&common::new_run("other", "default"), 3).unwrap();
    let mut refusals = Vec::new();
    let claimed = s
        .claim_noting_refusals(
            epoch,
            &[
                common::claim_req(moved, "default"),
                common::claim_req(other, "default"),
            ],
            4,
            &mut refusals,
        )
        .expect("a run holding seats already is not an error of the claim");
    let ids: Vec<RunId> = claimed.iter().map(|c| c.run.id).collect();
    if db.is_postgres() {
        assert_eq!(ids, [other]);
        assert_eq!(s.get_run(moved).unwrap().status, RunStatus::Queued);
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert_eq!(refusals[0].run_id, moved);
        assert!(
            refusals[0].reason.contains("seats of an earlier claim"),
            "{refusals:?}"
        );
    } else {
        assert_eq!(ids, [moved, other]);
        assert!(refusals.is_empty(), "{refusals:?}");
    }
}

/// A queued row another program wrote that fleet cannot read — arguments that are not JSON,
/// an attempt number out of range — is a refusal of that run's claim alone, undone whole: the
/// other claims of the batch go on, where an error would stop every claim of every EVAL.
fn a_row_fleet_cannot_read_is_refused_alone(db: &Db) {
    for (column, value) in [("args", "'not json'"), ("attempt", "5000000000")] {
        let s = db.store();
        let epoch = common::take_over(&s);
        let bad = s.enqueue(&common::new_run("bad", "default"), 1).unwrap();
        let good = s.enqueue(&common::new_run("good", "default"), 1).unwrap();
        let write = format!("UPDATE runs SET {column} = {value} WHERE id = {bad};");
        db.exec(&write, &write);
        let mut refusals = Vec::new();
        let claimed = s
            .claim_noting_refusals(
                epoch,
                &[
                    common::claim_req(bad, "default"),
                    common::claim_req(good, "default"),
                ],
                2,
                &mut refusals,
            )
            .unwrap_or_else(|e| {
                panic!("{column}: an unreadable row is no error of the claim: {e}")
            });
        let ids: Vec<RunId> = claimed.iter().map(|c| c.run.id).collect();
        assert_eq!(ids, [good], "{column}");
        assert_eq!(refusals.len(), 1, "{column}: {refusals:?}");
        assert_eq!(refusals[0].run_id, bad);
        assert!(
            refusals[0].reason.contains("cannot be read"),
            "{column}: {refusals:?}"
        );
        // Undone whole: still queued, never claimed.
        let left = db.count(&format!(
            "SELECT count(*) FROM runs WHERE id = {bad} AND status = 'queued' AND claim_token = 0"
        ));
        assert_eq!(left, 1, "{column}");
        s.apply(epoch, &[common::succeeded(&claimed[0].run)], 3)
            .unwrap();
        db.exec(
            &format!("DELETE FROM runs WHERE id = {bad};"),
            &format!("DELETE FROM runs WHERE id = {bad};"),
        );
    }
}

both_backends!(
    a_row_fleet_cannot_read_is_refused_alone,
    a_run_set_back_to_queued_under_its_claim_stops_no_other_claim,
    a_claim_that_fails_otherwise_than_on_the_unique_index_is_an_error,
    a_claim_refused_by_a_trigger_leaves_that_run_queued_and_claims_the_others,
    a_claim_a_trigger_drops_silently_is_reported_as_refused,
    a_claim_whose_event_is_refused_is_undone_alone,
    a_claim_whose_transaction_a_trigger_ends_fails_whole,
);
