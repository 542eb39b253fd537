//! Fencing, never guessing: host b is frozen (every one of its processes SIGSTOPped) with a run
//! in flight. Silence alone moves nothing: `fleet hosts forget b` is refused while b's heartbeat
//! is fresh, and b keeps its run and its seat. Once b is silent, forgetting it marks the run
//! lost and retries it on another host. Thawed, b writes nothing over the rows it lost (no
//! event from its old epoch after the forget), ends its stale command, and rejoins under a new
//! epoch; the commands' markers, with b's frozen stretch cut out, show the namespace cap held
//! once the seat moved.

use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::harness::*;
use crate::markers::*;

/// How long a heartbeat may be old before the host counts as silent (the daemons beat every
/// 2 s); the waits below allow for it and a loaded machine.
const SILENCE: Duration = Duration::from_secs(10);

/// Every event of run `id`, as rows of text (all columns), in order.
fn events_of(sql: &mut postgres::Client, id: i64) -> Vec<String> {
    sql.query(
        "SELECT to_jsonb(e)::text FROM events e WHERE run_id = $1 ORDER BY seq",
        &[&id],
    )
    .expect("read the events")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[test]
fn a_forgotten_host_comes_back_writes_nothing_over_its_lost_run_and_ends_its_command() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b", "c"], |dir| {
        let cmd = sh(&marked(&markers_in(dir), &gated(dir)));
        format!(
            "max_concurrency = 6\n\
             [namespaces.n]\nmax_concurrency = 1\n\
             [projects.p]\nnamespace = \"n\"\nretries = 1\nretry_backoff = \"0s\"\n\
             kill_grace = \"2s\"\ncommand = {cmd}\n"
        )
    }) else {
        return;
    };
    let shared = h.shared().to_path_buf();
    // The run starts on b: b is the only host up when it is queued.
    let b = h.start("b");
    let r1 = h.fleet("b").enqueue("p");
    let before = h.fleet("b").wait_run(r1, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    let pid = before["pid"].as_i64().unwrap() as i32;
    h.wait_until(DEADLINE, "the run's start marker", || {
        read_markers(&h.markers()).iter().any(|m| m.run == r1)
    });
    let started_on = read_markers(&h.markers())
        .into_iter()
        .find(|m| m.run == r1)
        .unwrap()
        .host;
    assert_eq!(started_on, "b", "{before}");
    let _a = h.start("a");
    let _c = h.start("c");
    let old_epoch = h.host_row("a", "b").expect("b in `fleet hosts`")["epoch"]
        .as_i64()
        .expect("an epoch for b");

    let frozen = freeze(&h, "b", &b);
    // From here every process of b is stopped (the cut below starts late, never early).
    let frozen_at = now_ns();
    // Silence proves nothing yet: b's last heartbeat is fresh, so forgetting it is refused.
    let early = h.fleet("a").cmd(&["hosts", "forget", "b"]);
    assert_eq!(
        early.code(),
        Some(1),
        "forget of a host that beat a moment ago: {early:?}"
    );
    h.wait_until(SILENCE * 4, "b to be listed silent", || {
        h.host_row("a", "b")
            .is_some_and(|r| r["state"].as_str() == Some("silent"))
    });
    let r = h.fleet("a").run(r1);
    assert_eq!(status_of(&r), "running", "a silent host keeps its run: {r}");

    let out = h.fleet("a").cmd_ok(&["hosts", "forget", "b"]);
    eprintln!("fleet hosts forget b:\n{out}");
    let lost = h.fleet("a").wait_status(r1, "lost");
    let mut sql = h.sql();
    let seq_after_forget: i64 = sql
        .query_one("SELECT coalesce(max(seq), 0) FROM events", &[])
        .unwrap()
        .get(0);
    let events_after_forget = events_of(&mut sql, r1);

    // The retry runs on a host that is not b.
    let mut retry = Value::Null;
    h.wait_until(
        DEADLINE,
        "the retry of the lost run to run elsewhere",
        || {
            retry = h
                .runs()
                .into_iter()
                .find(|r| r["retry_of"].as_i64() == Some(r1))
                .unwrap_or(Value::Null);
            retry["status"] == "running"
        },
    );
    let r2 = id_of(&retry);
    let mut retried_on = String::new();
    h.wait_until(DEADLINE, "the retry's start marker", || {
        read_markers(&h.markers())
            .into_iter()
            .find(|m| m.run == r2)
            .map(|m| retried_on = m.host)
            .is_some()
    });
    assert_ne!(retried_on, "b", "{retry}");
    release(&shared, r2);
    let done = h.fleet("a").wait_terminal(r2);
    assert_eq!(status_of(&done), "succeeded", "{done}");

    // b comes back: it must end its stale command, write nothing over the lost run, rejoin.
    let thawed_at = now_ns();
    thaw(&frozen);
    h.wait_until(DEADLINE, "b to end its stale command", || process_gone(pid));
    let gone_at = now_ns();
    h.wait_until(DEADLINE, "b to rejoin under a new epoch", || {
        h.host_row("a", "b").is_some_and(|r| {
            r["state"].as_str() == Some("alive") && r["epoch"].as_i64() > Some(old_epoch)
        })
    });
    let mut b = b;
    b.assert_alive();
    let said = b.stderr();
    eprintln!("b's log after the thaw:\n{said}");
    let after = h.fleet("a").run(r1);
    assert_eq!(after, lost, "b changed the row of the run it lost");
    assert_eq!(
        events_of(&mut sql, r1),
        events_after_forget,
        "b wrote events for the run it lost"
    );
    let from_old: i64 = sql
        .query_one(
            "SELECT count(*) FROM events WHERE epoch = $1 AND seq > $2",
            &[&old_epoch, &seq_after_forget],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        from_old, 0,
        "events written by b's forgotten epoch after the forget"
    );

    // The host works again: more runs, wherever they land.
    release_all(&shared);
    let more: Vec<i64> = (0..3).map(|_| h.fleet("c").enqueue("p")).collect();
    for id in more {
        let r = h.fleet("a").wait_terminal(id);
        assert_eq!(status_of(&r), "succeeded", "{r}");
    }

    let mut markers = read_markers(&h.markers());
    let stale: Vec<&Marker> = markers.iter().filter(|m| m.run == r1).collect();
    assert!(
        stale.iter().all(|m| m.kind != Kind::End),
        "the lost run's command finished its work: {stale:?}"
    );
    // Killed outright (SIGKILL after the grace) it wrote no line: it ran until seen gone.
    let unmarked_end = (!stale.iter().any(|m| m.kind == Kind::Killed)).then(|| Marker {
        kind: Kind::Killed,
        at: gone_at,
        ..stale[0].clone()
    });
    markers.extend(unmarked_end);
    let all = intervals(&markers).unwrap_or_else(|e| panic!("{e}"));
    let cut = without_freeze(&all, "b", frozen_at, thawed_at);
    let peaks = peaks(&cut);
    eprintln!("peaks with b's frozen stretch cut out {peaks:?}");
    if let Err(e) = peaks.check(&Limits {
        global: 6,
        namespaces: &[("n", 1)],
        hosts: &[],
    }) {
        panic!("{e}");
    }
    h.assert_check_ok("a");
}
