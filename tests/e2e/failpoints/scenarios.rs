//! The crash at one failpoint: what the crashing daemon (or shim) must leave behind, before
//! [`finish`] restarts clean and checks the outcome.

use std::collections::BTreeSet;

use super::checks::*;
use super::crashy::{poll, Crashy};
use super::CAP;
use crate::common::*;

/// The test for one failpoint: crash there, restart clean, check.
pub fn crash_at(name: &str) {
    let s = scenario();
    let f = &s.f;
    let ids = s.ids.clone();
    match name {
        // The claim is committed, the daemon dies before any shim is spawned.
        "daemon-after-claim" | "daemon-after-finalize" => {
            let mut d = Crashy::start(f, &format!("{name}=return"));
            d.wait_abort(f);
            let claimed = in_status(f, &ids, "starting");
            assert_eq!(
                claimed.len(),
                CAP,
                "the first EVAL claims {CAP} runs before {name}\n{}",
                d.describe()
            );
            assert!(shims(f).is_empty(), "no shim may have been spawned");
            finish(&s, name, Expect::FirstAttempt, &[&d]);
            assert_eq!(
                requeued(f),
                claimed,
                "exactly the claims the crash left must be requeued as never started"
            );
            for id in &claimed {
                assert!(has_tombstone(f, *id), "run {id}: no tombstones");
            }
        }
        // The first shim is spawned, the daemon dies; the shim lives on and is adopted.
        "daemon-after-spawn" => {
            let mut d = Crashy::start(f, "daemon-after-spawn=return");
            d.wait_abort(f);
            let claimed = in_status(f, &ids, "starting");
            assert_eq!(claimed.len(), CAP, "{}", d.describe());
            // The spawned shim outlives the daemon: it takes its lock and writes `started`.
            let mut spawned = BTreeSet::new();
            poll(
                f,
                &[&d],
                DEADLINE,
                "the orphaned shim to write `started`",
                || {
                    spawned = with_file(f, &ids, "started");
                    !spawned.is_empty()
                },
            );
            assert_eq!(
                spawned.len(),
                1,
                "the daemon aborts right after its first spawn"
            );
            finish(&s, name, Expect::FirstAttempt, &[&d]);
            let rq = requeued(f);
            assert!(
                rq.is_disjoint(&spawned),
                "the run whose shim lived on ({spawned:?}) must be adopted, never requeued ({rq:?})"
            );
            let never: BTreeSet<i64> = claimed.difference(&spawned).copied().collect();
            assert_eq!(rq, never, "the claim that got no shim must be requeued");
        }
        // A shim's exit is known but not yet in the database when the daemon dies. With
        // `=return` the failpoint would fire in the first EVAL, before any claim (it runs in
        // every EVAL); `1*off->return` lets the first EVAL claim and spawn, and aborts the next
        // one. The shims finish while no daemon runs, so their exit records wait for the next.
        "daemon-before-finalize" => {
            let mut d = Crashy::start(f, "daemon-before-finalize=1*off->return");
            d.wait_abort(f);
            let active: BTreeSet<i64> = in_status(f, &ids, "starting")
                .union(&in_status(f, &ids, "running"))
                .copied()
                .collect();
            assert_eq!(active.len(), CAP, "{}", d.describe());
            poll(f, &[&d], DEADLINE, "the orphaned shims to finish", || {
                shims(f).is_empty()
            });
            let awaiting: BTreeSet<i64> = fleet_check_json(f)["awaiting_finalize"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            assert_eq!(
                awaiting, active,
                "the runs the crash left active ended with no daemon: their exit records must \
                 await the next daemon"
            );
            finish(&s, name, Expect::FirstAttempt, &[&d]);
            assert!(
                requeued(f).is_empty(),
                "nothing may be requeued: {:?}",
                requeued(f)
            );
        }
        // Recovery of a claim that never started, crashed part-way; twice, then clean.
        "recovery-before-tombstone" | "recovery-after-tombstone" | "recovery-before-apply" => {
            let mut first = Crashy::start(f, "daemon-after-claim=return");
            first.wait_abort(f);
            let claimed = in_status(f, &ids, "starting");
            assert_eq!(claimed.len(), CAP, "{}", first.describe());
            let claimed_v: Vec<i64> = claimed.iter().copied().collect();
            let mut crashes = Vec::new();
            for _ in 0..2 {
                let mut d = Crashy::start(f, &format!("{name}=return"));
                d.wait_abort(f);
                assert_eq!(
                    in_status(f, &ids, "starting"),
                    claimed,
                    "a recovery that crashed must not have changed the database\n{}",
                    d.describe()
                );
                let tombs = with_file(f, &claimed_v, "tombstones");
                match name {
                    "recovery-before-tombstone" => assert!(tombs.is_empty(), "{tombs:?}"),
                    "recovery-after-tombstone" => assert_eq!(tombs.len(), 1, "{tombs:?}"),
                    _ => assert_eq!(tombs, claimed, "every claim is tombstoned before apply"),
                }
                crashes.push(d);
            }
            let all: Vec<&Crashy> = std::iter::once(&first).chain(crashes.iter()).collect();
            finish(&s, name, Expect::FirstAttempt, &all);
            assert_eq!(requeued(f), claimed);
        }
        // The shim dies before `started`: the daemon (alive) requeues, same attempt, again and
        // again while the failpoint stays on.
        // A torn `started` (the shim died mid-write) is no `started`: the command never ran.
        "shim-before-lock"
        | "shim-after-lock"
        | "shim-before-started"
        | "shim-started-record-torn" => {
            let mut d = Crashy::start(f, &format!("{name}=return"));
            poll(
                f,
                &[&d],
                DEADLINE,
                "a claim requeued as never started",
                || !requeued(f).is_empty() && !with_file(f, &ids, "tombstones").is_empty(),
            );
            d.assert_alive();
            assert!(
                with_file(f, &ids, "started").is_empty(),
                "no shim may get as far as `started`"
            );
            assert!(in_status(f, &ids, "lost").is_empty(), "never lost");
            d.kill();
            finish(&s, name, Expect::FirstAttempt, &[&d]);
        }
        // The shim dies after `started`, before `exit`: the attempt is lost, and retried.
        // A torn `exit` is no `exit`: the end is unknown.
        "shim-after-started"
        | "shim-after-exit"
        | "shim-before-exit-file"
        | "shim-exit-record-torn" => {
            let mut d = Crashy::start(f, &format!("{name}=return"));
            let mut lost = BTreeSet::new();
            poll(f, &[&d], DEADLINE, "an attempt to be lost", || {
                lost = in_status(f, &ids, "lost");
                !lost.is_empty()
            });
            d.assert_alive();
            d.kill();
            let lost_v: Vec<i64> = lost.iter().copied().collect();
            assert_eq!(
                with_file(f, &lost_v, "started"),
                lost,
                "lost runs were started"
            );
            assert!(
                with_file(f, &lost_v, "exit").is_empty(),
                "lost runs have no exit record"
            );
            finish(
                &s,
                name,
                Expect::LostThenRetried {
                    command_ran: name != "shim-after-started",
                },
                &[&d],
            );
        }
        // The fork server forks the first shim, or hands the first request to a shim whose run
        // ended, and dies before it answers: the daemon lives on, never starts a second shim
        // for that claim, and execs every later shim.
        "forkserver-after-fork" | "forkserver-after-handover" => {
            let mut d = Crashy::start(f, &format!("{name}=return"));
            poll(f, &[&d], DEADLINE, "every run to succeed", || {
                in_status(f, &ids, "succeeded").len() == ids.len()
            });
            d.assert_alive();
            let log = d.stderr();
            assert!(
                log.contains("took the request but gave no answer")
                    && log.contains("every shim from now on is exec'd"),
                "the daemon should say its fork server is gone:\n{log}"
            );
            d.kill();
            finish(&s, name, Expect::FirstAttempt, &[&d]);
        }
        // The exit record is durable, then the shim dies: the real status.
        "shim-after-exit-file" => {
            let mut d = Crashy::start(f, "shim-after-exit-file=return");
            poll(f, &[&d], DEADLINE, "a run to end", || {
                !in_status(f, &ids, "succeeded").is_empty()
            });
            d.assert_alive();
            d.kill();
            // (A claim may still be requeued: the SIGKILL can land between a claim and its spawn.)
            finish(&s, name, Expect::FirstAttempt, &[&d]);
        }
        // Not a crash: the first three attempts at writing a record fail, as on a full disk.
        // The shim keeps its lock and retries, so the daemon (alive) sees every run through
        // with its real status: nothing lost, nothing requeued.
        "shim-started-record-fails" | "shim-exit-record-fails" => {
            let mut d = Crashy::start(f, &format!("{name}=3*return"));
            poll(f, &[&d], DEADLINE, "every run to succeed", || {
                in_status(f, &ids, "succeeded").len() == ids.len()
            });
            d.assert_alive();
            let record = if name == "shim-exit-record-fails" {
                "exit"
            } else {
                "started"
            };
            let log = d.stderr();
            assert!(
                log.contains(&format!("could not write the {record} record"))
                    && log.contains(&format!("the {record} record is written, after 3 failed")),
                "each shim should say it retried its {record} record:\n{log}"
            );
            assert!(requeued(f).is_empty(), "nothing may be requeued");
            d.kill();
            finish(&s, name, Expect::FirstAttempt, &[&d]);
        }
        // Not a crash: the first three shim spawns fail with EMFILE, as when the daemon is out of
        // file descriptors. Nothing could have started, so each such claim goes back to the
        // queue, same attempt (never `failed`), and claims wait for a backoff meanwhile.
        "spawn-shim-emfile" => {
            let mut d = Crashy::start(f, &format!("{name}=3*return"));
            poll(f, &[&d], DEADLINE, "every run to succeed", || {
                in_status(f, &ids, "succeeded").len() == ids.len()
            });
            d.assert_alive();
            let log = d.stderr();
            assert!(
                log.contains("for lack of a resource")
                    && log.contains("Too many open files")
                    && !log.contains("spawn failed"),
                "the daemon should say it requeued for lack of a resource:\n{log}"
            );
            let requeued = requeued(f);
            assert!(
                !requeued.is_empty() && requeued.len() <= 3,
                "the claims whose spawn failed must be requeued as never started: {requeued:?}"
            );
            d.kill();
            finish(&s, name, Expect::FirstAttempt, &[&d]);
        }
        // Pruning crashes after a batch's folders went, before their rows: p0 gets a second
        // run, so that its first is the one `keep_runs = 1` lets go. The crash leaves an ended
        // run without its folder, which `fleet check` accepts; the next daemon forgets it.
        "prune-after-files-removal" => {
            let text = std::fs::read_to_string(f.file("fleet.toml")).unwrap();
            f.replace_config(&format!("tick = \"100ms\"\nkeep_runs = 1\n{text}"));
            let second = f.enqueue("p0");
            let mut d = Crashy::start(f, "prune-after-files-removal=return");
            d.wait_abort(f);
            let first = ids[0];
            assert!(
                !run_ids_on_disk(f).contains(&first),
                "run {first}'s files go before its row"
            );
            assert_eq!(
                statuses(f).get(&first).map(String::as_str),
                Some("succeeded")
            );
            assert_check_ok(f);
            let _clean = f.start_daemon();
            poll(
                f,
                &[&d],
                DEADLINE,
                "the next daemon to forget the run",
                || !statuses(f).contains_key(&first),
            );
            let left = statuses(f);
            assert!(left.values().all(|s| s == "succeeded"), "{left:?}");
            assert!(left.contains_key(&second), "p0's newest run is kept");
            assert_check_ok(f);
        }
        other => panic!("no scenario for failpoint {other:?}: add one to crash_at"),
    }
}
