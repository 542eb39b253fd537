//! The simulator itself: a seed replays, and short runs of a few seeds hold every invariant
//! (CI runs the long ones through the binary).

use fleet_sim::{run, Options};

/// The same seed draws the same steps, faults and checks: a failure's seed replays it.
#[test]
fn a_seed_replays_the_same_simulation() {
    let options = Options {
        seed: 7,
        steps: 1_500,
    };
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
    let a = run(&Options {
        seed: 1,
        steps: 800,
    })
    .expect("seed 1 holds");
    let b = run(&Options {
        seed: 2,
        steps: 800,
    })
    .expect("seed 2 holds");
    assert_ne!(
        (a.runs, a.starts, a.evals, &a.faults),
        (b.runs, b.starts, b.evals, &b.faults)
    );
}
