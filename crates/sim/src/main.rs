//! `fleet-sim`: runs seeded simulations of the fleet daemon and checks its invariants at
//! every step. Exits 0 when every seed held, 1 with the replay command of the first violation
//! (or with the reason the simulation's own world could not be made: a database server that
//! cannot be reached, say), 2 on bad usage.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

use fleet_sim::{replay_command, run_shrinking, Failure, Options, Summary};

/// Deterministic simulation of the fleet daemon: its real decisions against a real store
/// (SQLite; or PostgreSQL shared by several hosts), with simulated shims, clocks and crashes.
#[derive(Parser, Debug)]
#[command(name = "fleet-sim", version)]
struct Cli {
    /// The seed of the (first) simulation; a seed replays the same steps.
    #[arg(long, conflicts_with = "random")]
    seed: Option<u64>,
    /// How many seeds to run, from `--seed` up (each `--steps` long).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "random")]
    seeds: u64,
    /// Run one seed drawn at random instead (printed, so that it can be replayed).
    #[arg(long)]
    random: bool,
    /// Steps per seed, before the faults stop and the simulation drains.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// How many hosts, each a daemon with its own state directory and clock, sharing the
    /// database (more than one needs --database).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=8))]
    hosts: u64,
    /// A PostgreSQL server (postgresql://… URL) on which each simulation makes a database of
    /// its own, dropped when it ends. Without it: SQLite, one host.
    #[arg(long, value_name = "URL")]
    database: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.hosts > 1 && cli.database.is_none() {
        eprintln!(
            "fleet-sim: --hosts {} needs --database: many hosts share a PostgreSQL database",
            cli.hosts
        );
        return ExitCode::from(2);
    }
    if let Some(url) = &cli.database {
        if let Err(e) = url.parse::<postgres::Config>() {
            eprintln!("fleet-sim: --database: not a PostgreSQL URL ({e})");
            return ExitCode::from(2);
        }
    }
    let mut seeds: Vec<u64> = match cli.seed {
        Some(first) => (0..cli.seeds).map(|i| first.wrapping_add(i)).collect(),
        None if cli.random => Vec::new(),
        None => (0..cli.seeds).collect(),
    };
    if cli.random {
        let random = std::collections::hash_map::RandomState::new();
        let seed = std::hash::BuildHasher::hash_one(&random, Instant::now());
        println!("random seed: {seed}");
        seeds.push(seed);
    }
    let started = Instant::now();
    let mut total = Summary::default();
    for seed in seeds {
        let options = Options {
            seed,
            steps: cli.steps,
            hosts: usize::try_from(cli.hosts).unwrap_or(1),
            database: cli.database.clone(),
        };
        match run_shrinking(&options) {
            Ok(summary) => {
                println!(
                    "seed {seed}: {} steps, {} runs ({} occurrences fired), {} starts, {} EVALs, {} faults injected, {} invariant checks: ok",
                    summary.steps,
                    summary.runs,
                    summary.fired,
                    summary.starts,
                    summary.evals,
                    summary.fault_total(),
                    summary.checks
                );
                total.steps += summary.steps;
                total.checks += summary.checks;
                total.runs += summary.runs;
                total.fired += summary.fired;
                total.starts += summary.starts;
                total.evals += summary.evals;
                for (k, v) in summary.faults {
                    *total.faults.entry(k).or_default() += v;
                }
            }
            Err((failure, steps)) => {
                match &failure {
                    Failure::Violation { .. } => {
                        eprintln!("fleet-sim: seed {seed}: invariant violated at {failure}");
                        eprintln!("replay: {}", replay_command(&options, steps));
                    }
                    // Nothing of fleet's to replay: the simulation's own world could not be made.
                    Failure::Setup(_) => eprintln!("fleet-sim: {failure}"),
                }
                return ExitCode::from(1);
            }
        }
    }
    let faults: Vec<String> = total
        .faults
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "all seeds held: {} steps, {} runs ({} occurrences fired), {} starts, {} EVALs, {} faults injected ({}), {} invariant checks, in {:.1} s",
        total.steps,
        total.runs,
        total.fired,
        total.starts,
        total.evals,
        total.fault_total(),
        faults.join(", "),
        total.checks,
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
