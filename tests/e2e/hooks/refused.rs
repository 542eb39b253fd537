//! What a run's end adds, refused by the database (another program's trigger, with an error or
//! dropping the row silently, as the hook's run here): a refused
//! retry or failure hook's run costs that run its retry or its hook, named in the log, and
//! nothing else — its end is written, and every other run goes on. An end refused even so
//! leaves that run active, holding its seat, while the others go on, and is tried again
//! after a growing wait (not at every EVAL) until the database accepts it.

use super::runs_of;
use crate::common::*;

#[test]
fn a_refused_retry_hook_or_end_holds_up_only_its_own_run() {
    let f = Fleet::new(&format!(
        "tick = \"200ms\"\n\
         [projects.flaky]\ncommand = {fail}\nretries = 2\nretry_backoff = \"100ms\"\n\
         [projects.bad]\ncommand = {fail}\non_failure = \"alert\"\n\
         [projects.alert]\ncommand = [\"true\"]\n\
         [projects.stuck]\ncommand = [\"true\"]\n\
         [projects.ok]\ncommand = [\"true\"]\n",
        fail = sh("exit 3"),
    ));
    // Creates the database, then the other program's triggers.
    let first = f.enqueue("ok");
    f.db()
        .execute_batch(
            "CREATE TRIGGER refuse_retries BEFORE INSERT ON runs \
               WHEN NEW.project = 'flaky' AND NEW.trigger = 'retry' \
               BEGIN SELECT RAISE(ABORT, 'no retries here'); END;\n\
             CREATE TRIGGER refuse_alerts BEFORE INSERT ON runs WHEN NEW.project = 'alert' \
               BEGIN SELECT RAISE(IGNORE); END;\n\
             CREATE TRIGGER refuse_stuck_end BEFORE UPDATE OF status ON runs \
               WHEN NEW.project = 'stuck' AND NEW.status = 'succeeded' \
               BEGIN SELECT RAISE(ABORT, 'not ending this one'); END;",
        )
        .unwrap();
    let d = f.start_daemon();
    assert_eq!(status_of(&f.wait_terminal(first)), "succeeded");
    let stuck = f.enqueue("stuck");
    let flaky = f.enqueue("flaky");
    let bad = f.enqueue("bad");
    assert_eq!(status_of(&f.wait_terminal(flaky)), "failed");
    assert_eq!(status_of(&f.wait_terminal(bad)), "failed");
    // The end refused: its run stays active while the others go on.
    let refusals = || {
        d.stderr()
            .lines()
            .filter(|l| l.contains(&format!("run={stuck}")) && l.contains("not ending this one"))
            .count()
    };
    f.wait_until(DEADLINE, "the daemon to log the refused end", || {
        refusals() > 0
    });
    let first_refusal = std::time::Instant::now();
    let later = f.enqueue("ok");
    assert_eq!(status_of(&f.wait_terminal(later)), "succeeded");
    assert!(
        ["starting", "running"].contains(&status_of(&f.run(stuck))),
        "{}",
        f.run(stuck)
    );
    assert_eq!(runs_of(&f, "flaky").len(), 1, "no retry: {:#?}", f.runs());
    assert!(
        runs_of(&f, "alert").is_empty(),
        "no hook run: {:#?}",
        f.runs()
    );
    // The run's history says what was not queued, not only the log.
    for (run, what) in [(flaky, "its retry"), (bad, "its failure hook's run")] {
        let note = f.run(run)["reason"].as_str().unwrap_or("").to_string();
        assert!(
            note.contains(&format!("{what} not queued: the database refused it")),
            "{}",
            f.run(run)
        );
    }
    let log = d.stderr();
    for (run, what) in [(flaky, "its retry"), (bad, "its failure hook's run")] {
        assert!(
            log.lines().any(|l| l.contains(&format!("run={run}"))
                && l.contains(&format!("refused this run's end with {what}"))),
            "{log}"
        );
    }
    // Tried again after 1 s, then 2 s…, not at every EVAL: over 2.5 s of 200 ms ticks that is
    // at most three tries (the first one's included), against a dozen.
    f.wait_until(DEADLINE, "2.5 s after the first refusal", || {
        first_refusal.elapsed() >= std::time::Duration::from_millis(2_500)
    });
    assert!(refusals() <= 4, "{}", d.stderr());
    // Accepted again: the end is written.
    f.db()
        .execute_batch("DROP TRIGGER refuse_stuck_end")
        .unwrap();
    assert_eq!(status_of(&f.wait_terminal(stuck)), "succeeded");
    assert_check_ok(&f);
}

/// A claim the database refuses (another program's trigger) leaves its run queued while every
/// other run goes on — those queued behind it in its own project included — and holds it back
/// for a growing wait: over 2.5 s of EVALs it is asked for, and warned about, a few times, not
/// at every EVAL. Once the trigger is gone it starts.
#[test]
fn a_refused_claim_is_held_back_not_asked_for_at_every_eval() {
    let f = Fleet::new(
        "tick = \"200ms\"\nmax_concurrency = 2\n\
         [projects.frozen]\ncommand = [\"true\"]\n\
         [projects.ok]\ncommand = [\"true\"]\n",
    );
    // Creates the database, then the other program's trigger.
    let frozen = f.enqueue("frozen");
    f.db()
        .execute_batch(&format!(
            "CREATE TRIGGER refuse_frozen BEFORE UPDATE OF status ON runs \
               WHEN NEW.id = {frozen} AND NEW.status = 'starting' \
               BEGIN SELECT RAISE(ABORT, 'frozen stays queued'); END;"
        ))
        .unwrap();
    let d = f.start_daemon();
    let refusals = || {
        d.stderr()
            .lines()
            .filter(|l| {
                l.contains(&format!("run={frozen}"))
                    && l.contains("claim refused by the database")
                    && l.contains("frozen stays queued")
            })
            .count()
    };
    f.wait_until(DEADLINE, "the daemon to log the refused claim", || {
        refusals() > 0
    });
    // EVALs, one after the other, while the refused run waits at the head of its queue.
    let first_refusal = std::time::Instant::now();
    let mut ran = 0;
    while first_refusal.elapsed() < std::time::Duration::from_millis(2_500) {
        let id = f.enqueue("ok");
        assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
        ran += 1;
    }
    assert!(ran >= 5, "only {ran} runs in 2.5 s");
    assert_eq!(status_of(&f.run(frozen)), "queued");
    // The runs queued behind it in its own project (one seat) are not held up by it.
    let behind = f.enqueue("frozen");
    assert_eq!(status_of(&f.wait_terminal(behind)), "succeeded");
    assert_eq!(status_of(&f.run(frozen)), "queued");
    // Asked for after 1 s and 2 s: three refusals at most, against one per EVAL before.
    assert!(refusals() <= 3, "{} refusals:\n{}", refusals(), d.stderr());
    assert!(
        d.stderr()
            .lines()
            .any(|l| l.contains(&format!("run={frozen}")) && l.contains("retry_in=1s")),
        "{}",
        d.stderr()
    );
    f.db().execute_batch("DROP TRIGGER refuse_frozen").unwrap();
    assert_eq!(status_of(&f.wait_terminal(frozen)), "succeeded");
    assert_check_ok(&f);
}
