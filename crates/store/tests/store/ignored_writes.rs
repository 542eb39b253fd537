//! A write of a run's status that another program's trigger drops without an error
//! (`RAISE(IGNORE)` on SQLite, `RETURN NULL` on PostgreSQL) is an error of the transition —
//! counted as a refused row, so the daemon tries it again later — never taken for written:
//! nothing of the transition is kept, its event included, so `fleet check` finds no status
//! the run never had.

use store::*;

use crate::common;
use crate::common::Db;

/// A store on `db`, taken over, with one run of project `p` claimed (`starting`).
fn one_claimed_run(db: &Db) -> (Store, i64, Run) {
    let s = db.store();
    let epoch = common::take_over(&s);
    let id = s.enqueue(&common::new_run("p", "default"), 1).unwrap();
    let run = s
        .claim(epoch, &[common::claim_req(id, "default")], 2)
        .unwrap()
        .remove(0)
        .run;
    (s, epoch, run)
}

fn an_ignored_status_write_fails_the_transition_and_keeps_nothing(db: &Db) {
    let (s, epoch, run) = one_claimed_run(db);
    let id = run.id;
    db.exec(
        "CREATE TRIGGER drop_end BEFORE UPDATE OF status ON runs \
           WHEN NEW.status = 'succeeded' BEGIN SELECT RAISE(IGNORE); END;",
        "CREATE FUNCTION drop_end() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN IF NEW.status = 'succeeded' THEN RETURN NULL; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER drop_end BEFORE UPDATE OF status ON runs FOR EACH ROW \
           EXECUTE FUNCTION drop_end();",
    );
    let events_before = s.events_after(0).unwrap().len();
    let err = s
        .apply(epoch, &[common::succeeded(&run)], 3)
        .expect_err("a dropped write is not a written one");
    assert!(
        matches!(err, StoreError::RowIgnored { run: r, to: RunStatus::Succeeded } if r == id),
        "{err}"
    );
    assert!(err.is_refused_row(), "{err}");
    assert_eq!(s.get_run(id).unwrap().status, RunStatus::Starting);
    assert_eq!(
        s.events_after(0).unwrap().len(),
        events_before,
        "no event kept"
    );
}

/// The same for a new run: a retry whose insert a trigger drops fails the end it came with,
/// as a refusal, and leaves nothing of it.
fn an_ignored_insert_fails_the_transition_and_keeps_nothing(db: &Db) {
    let (s, epoch, run) = one_claimed_run(db);
    let id = run.id;
    db.exec(
        "CREATE TRIGGER drop_retry BEFORE INSERT ON runs \
           WHEN NEW.trigger = 'retry' BEGIN SELECT RAISE(IGNORE); END;",
        "CREATE FUNCTION drop_retry() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN IF NEW.trigger = 'retry' THEN RETURN NULL; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER drop_retry BEFORE INSERT ON runs FOR EACH ROW \
           EXECUTE FUNCTION drop_retry();",
    );
    let failed = Transition {
        run_id: run.id,
        token: run.claim_token,
        change: Change::Finish {
            status: RunStatus::Failed,
            exit_code: Some(3),
            signal: None,
            reason: None,
            retry: Some(3),
            finished_at: None,
        },
    };
    let err = s
        .apply(epoch, &[failed], 3)
        .expect_err("a dropped insert is not an inserted run");
    assert!(
        matches!(&err, StoreError::InsertIgnored { project, trigger } if project == "p" && trigger == "retry"),
        "{err}"
    );
    assert!(err.is_refused_row(), "{err}");
    assert_eq!(s.get_run(id).unwrap().status, RunStatus::Starting);
}

both_backends!(
    an_ignored_status_write_fails_the_transition_and_keeps_nothing,
    an_ignored_insert_fails_the_transition_and_keeps_nothing,
);
