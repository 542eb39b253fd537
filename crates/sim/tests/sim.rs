//! The simulator itself: a seed replays, and short runs of a few seeds hold every invariant
//! (CI runs the long ones through the binary).

use fleet_sim::{run, Options};

/// The same seed draws the same steps, faults and checks: a failure's seed replays it.
#[test]
fn a_seed_replays_the_same_simulation() {
    let options = Options::new(7, 1_500);
    let a = run(&options).expect("seed 7 holds");
    let b = run(&options).expect("seed 7 holds again");
    assert_eq!(
        (a.steps, a.runs, a.starts, a.evals, a.checks, &a.faults),
        (b.steps, b.runs, b.starts, b.evals, b.checks, &b.faults)
    );
    assert!(
        a.starts > 0 && a.fault_total() > 0,
        "it did something: {a:?}"
    );
}

/// Another seed draws another simulation.
#[test]
fn another_seed_draws_other_steps() {
    let a = run(&Options::new(1, 800)).expect("seed 1 holds");
    let b = run(&Options::new(2, 800)).expect("seed 2 holds");
    assert_ne!(
        (a.runs, a.starts, a.evals, &a.faults),
        (b.runs, b.starts, b.evals, &b.faults)
    );
}

/// The PostgreSQL server of the test cluster, as a `postgresql://` URL naming its own
/// database (the simulation makes one of its own there). `None` after pgtest's loud skip.
fn server() -> Option<String> {
    let db = pgtest::database()?;
    let field = |k: &str| {
        db.url
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or_default()
            .to_string()
    };
    Some(format!(
        "postgresql://{}@/{}?host={}&port={}",
        field("user"),
        db.name,
        field("host"),
        field("port")
    ))
}

/// Three hosts on one PostgreSQL database, with their clocks off the database's, host caps,
/// projects placed on some hosts, daemons started under a live host's name elsewhere, and
/// hosts lost, forgotten and back: ten thousand steps hold every invariant fleet-wide. (Seed
/// 0: with the claim's status checks or its cap seats removed, it reports a violation within
/// 3,000 steps; with `fleet check`'s reading of an earlier claim's files undone, at step 277.)
#[test]
fn three_hosts_on_postgresql_hold_the_invariants() {
    let Some(server) = server() else {
        return;
    };
    let options = Options {
        seed: 0,
        steps: 10_000,
        hosts: 3,
        database: Some(server),
    };
    let a = run(&options).unwrap_or_else(|f| panic!("seed 0 on three hosts: {f}"));
    for kind in [
        "a daemon started under a live host's name elsewhere",
        "a host's wall clock stepped",
        "daemon killed between two effects",
        "a host lost, and forgotten",
    ] {
        assert!(
            a.faults.get(kind).is_some_and(|n| *n > 0),
            "no {kind:?} in {a:?}"
        );
    }
    assert!(a.starts > 500, "it ran things: {a:?}");
}

/// Seed 1 of three hosts: with the claim's seat guard removed it reports a run claimed over
/// its project's `max_parallel` at step 1,695 (another host claimed between this host's
/// packing and its claim).
///
/// (Not asserted: that a many-hosts seed replays to the same counts. On PostgreSQL the steps
/// are the same, but rows a query does not order may come back in another order from one run
/// to the next, as the server's background work moves them, and a decision may then differ.)
#[test]
fn seed_1_of_three_hosts_holds() {
    let Some(server) = server() else {
        return;
    };
    let options = Options {
        seed: 1,
        steps: 2_000,
        hosts: 3,
        database: Some(server),
    };
    run(&options).unwrap_or_else(|f| panic!("seed 1 on three hosts: {f}"));
}

/// A regression: seed 0 found a daemon restarted after another program had ended the row of a
/// run whose command still ran: its recovery did not count that command, and it claimed a run
/// beyond the global cap (step 2,898 of seed 0 without the fix). Recovery now holds the seats
/// of every live shim the database does not hold as active.
#[test]
fn seed_0_a_run_ended_by_hand_keeps_its_seat_across_a_restart() {
    run(&Options::new(0, 3_500)).unwrap_or_else(|f| panic!("seed 0: {f}"));
}

/// A regression: seed 3 of three hosts found a run a `fleet hosts forget` ended `lost` not
/// recognised as such when its note already held one (a scheduled run's missed occurrences):
/// the forget's words came after it (step 6,243 without the fix).
#[test]
fn seed_3_of_three_hosts_holds() {
    let Some(server) = server() else {
        return;
    };
    let options = Options {
        seed: 3,
        steps: 7_000,
        hosts: 3,
        database: Some(server),
    };
    run(&options).unwrap_or_else(|f| panic!("seed 3 on three hosts: {f}"));
}
