//! A claim another program's trigger refuses: the runs queued behind it in its project start
//! at once in its place, the daemon does not spin while it waits (nor once the run is gone),
//! and `fleet_refused_claims` counts it while it is held, then goes back to 0.

use super::metrics::{by_label, scrape};
use crate::common::http_client::http_address;
use crate::common::*;

/// `fleet_eval_duration_seconds_count` and `fleet_refused_claims` of one scrape.
fn evals_and_held(addr: &str) -> (f64, f64) {
    let s = scrape(addr);
    let count = by_label(&s, "fleet_eval_duration_seconds_count", "")
        .get("")
        .copied()
        .unwrap_or(0.0);
    let held = by_label(&s, "fleet_refused_claims", "")
        .get("")
        .copied()
        .unwrap_or(-1.0);
    (count, held)
}

#[test]
fn a_refused_claim_neither_holds_up_its_project_nor_spins_the_daemon() {
    let f = Fleet::new(
        "http_listen = \"127.0.0.1:0\"\n\
         [projects.r]\ncommand = [\"true\"]\n",
    );
    let ids: Vec<i64> = (0..3).map(|_| f.enqueue("r")).collect();
    f.db()
        .execute_batch(&format!(
            "CREATE TRIGGER refuse_first BEFORE UPDATE OF status ON runs \
               WHEN NEW.id = {} AND NEW.status = 'starting' \
               BEGIN SELECT RAISE(ABORT, 'not this one'); END;",
            ids[0]
        ))
        .unwrap();
    let d = f.start_daemon();
    let addr = http_address(&d);
    let refusals = || {
        d.stderr()
            .lines()
            .filter(|l| l.contains("claim refused by the database") && l.contains("not this one"))
            .count()
    };
    // The two behind it start in its place, right after its first refusal: not after its
    // wait, nor at some later EVAL another run happens to bring.
    for &id in &ids[1..] {
        assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    }
    assert!(refusals() <= 2, "{} refusals:\n{}", refusals(), d.stderr());
    assert_eq!(status_of(&f.run(ids[0])), "queued");

    // Cancelled while held: nothing is left to claim. Once its wait is over the gauge is back
    // to 0, and the loop is idle — a handful of EVALs (ticks) in a second, not hundreds.
    let out = f.cmd(&["cancel", &ids[0].to_string()]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    f.wait_until(DEADLINE, "fleet_refused_claims back to 0", || {
        evals_and_held(&addr).1 == 0.0
    });
    let (before, _) = evals_and_held(&addr);
    let since = std::time::Instant::now();
    f.wait_until(DEADLINE, "a second to pass", || {
        since.elapsed() >= std::time::Duration::from_secs(1)
    });
    let (after, _) = evals_and_held(&addr);
    assert!(
        after - before <= 20.0,
        "{} EVALs in a second",
        after - before
    );
}
