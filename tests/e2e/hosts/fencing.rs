//! Fencing, never guessing: host b is frozen (every one of its processes SIGSTOPped) with a run
//! in flight. Silence alone moves nothing: `fleet hosts forget b` is refused while b's heartbeat
//! is fresh, and b keeps its run and its seat. Once b is silent, forgetting it marks the run
//! lost and retries it on another host. Thawed, b writes nothing over the rows it lost (no
//! event from its old epoch after the forget), ends its stale command, and rejoins under a new
//! epoch; the commands' markers, with b's frozen stretch cut out, show the namespace cap held
//! once the seat moved.

use std::time::Duration;

use serde_json::Value;

use super::harness::*;
use super::markers::*;
use crate::common::*;

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

/// A host forgotten while its daemon is down but its shim lives (the daemon was SIGKILLed, and
/// the operator forgot the host with `--force`): the forget ends the run `lost` and queues its
/// retry. When the host's daemon starts again, it must stop that stale command before it starts
/// anything beside it — above all the retry, which can only run on this host. The commands'
/// markers show the one global seat was never held twice.
#[test]
fn a_forgotten_host_restarted_stops_the_taken_run_before_starting_its_retry() {
    use_private_bin();
    let Some(h) = one_host_one_seat() else {
        return;
    };
    let (mut b, r1, pid) = running_on_b(&h);
    b.kill();
    assert!(!process_gone(pid), "the command outlives its daemon");
    h.fleet("b").cmd_ok(&["hosts", "forget", "b", "--force"]);
    h.fleet("b").wait_status(r1, "lost");
    let b = h.start("b");
    assert_retry_not_beside(&h, &b, r1, pid);
}

/// The same with the host's daemon alive when it is forgotten (`--force`): it finds itself
/// fenced at its next write, stops the command, rejoins — and keeps the run's slot until the
/// command is gone, so that the retry does not start beside it during its kill grace.
#[test]
fn a_host_forgotten_while_alive_stops_the_taken_run_before_starting_its_retry() {
    use_private_bin();
    let Some(h) = one_host_one_seat() else {
        return;
    };
    let (b, r1, pid) = running_on_b(&h);
    h.fleet("b").cmd_ok(&["hosts", "forget", "b", "--force"]);
    h.fleet("b").wait_status(r1, "lost");
    assert_retry_not_beside(&h, &b, r1, pid);
}

/// One host, `b`, a global cap of 1 and a gated project `p` with one retry, and a TERM trap
/// that takes a second to leave (so that a retry started during its kill grace would overlap).
fn one_host_one_seat() -> Option<Hosts> {
    Hosts::new(&["b"], |dir| {
        // The body's own TERM trap replaces `marked`'s: it takes a second before it marks the
        // command's end and leaves, as a command that cleans up would.
        let m = shell_quote(&markers_in(dir));
        let who = format!("$FLEET_RUN_ID ${HOST_VAR} $FLEET_NAMESPACE $FLEET_PROJECT");
        let body = format!(
            "trap \"sleep 1; echo killed {who} \\$(date +%s%N) >> {m}; exit 143\" TERM; {}",
            gated(dir)
        );
        let cmd = sh(&marked(&markers_in(dir), &body));
        format!(
            "max_concurrency = 1\n\
             [projects.p]\nretries = 1\nretry_backoff = \"0s\"\n\
             kill_grace = \"5s\"\ncommand = {cmd}\n"
        )
    })
}

/// Starts `b` and a run of `p` on it; returns the daemon, the run and its command's pid, once
/// the command has marked its start.
fn running_on_b(h: &Hosts) -> (Daemon<'_>, i64, i32) {
    let b = h.start("b");
    let r1 = h.fleet("b").enqueue("p");
    let pid = h.fleet("b").wait_run(r1, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    })["pid"]
        .as_i64()
        .unwrap() as i32;
    h.wait_until(DEADLINE, "the run's start marker", || {
        read_markers(&h.markers()).iter().any(|m| m.run == r1)
    });
    (b, r1, pid)
}

/// The retry of `r1` starts on `b` only once `r1`'s command (`pid`) was stopped: the markers
/// never show the one seat held twice.
fn assert_retry_not_beside(h: &Hosts, b: &Daemon<'_>, r1: i64, pid: i32) {
    let shared = h.shared().to_path_buf();
    let mut r2 = 0;
    h.wait_until(DEADLINE, "the retry to start", || {
        r2 = h
            .runs()
            .iter()
            .find(|r| r["retry_of"].as_i64() == Some(r1))
            .map_or(0, id_of);
        r2 != 0 && read_markers(&h.markers()).iter().any(|m| m.run == r2)
    });
    release(&shared, r2);
    assert_eq!(status_of(&h.fleet("b").wait_terminal(r2)), "succeeded");
    // Whatever happened to the stale command, let it end, so that its interval is closed.
    release_all(&shared);
    h.wait_until(DEADLINE, "the stale command to end", || process_gone(pid));
    let markers = read_markers(&h.markers());
    let all = intervals(&markers).unwrap_or_else(|e| panic!("{e}"));
    let peaks = peaks(&all);
    if let Err(e) = peaks.check(&Limits {
        global: 1,
        namespaces: &[],
        hosts: &[],
    }) {
        panic!("the retry ran beside the taken run: {e}");
    }
    assert!(
        markers
            .iter()
            .any(|m| m.run == r1 && m.kind == Kind::Killed),
        "the stale command was not stopped: {markers:?}"
    );
    assert!(
        b.stderr()
            .contains("this host was forgotten and the run taken from it"),
        "{}",
        b.stderr()
    );
    assert_eq!(status_of(&h.fleet("b").run(r1)), "lost");
}

/// A host forgotten after its command had ended on its own (its daemon was down, so nothing
/// wrote that end): the forget declares the run `lost`, its shim's record says `succeeded`, and
/// `fleet check` on that host sees no contradiction in it — the forget could not know.
#[test]
fn check_accepts_a_real_end_the_forget_could_not_know() {
    use_private_bin();
    let Some(h) = one_host_one_seat() else {
        return;
    };
    let (mut b, r1, pid) = running_on_b(&h);
    b.kill();
    release(h.shared(), r1);
    h.wait_until(DEADLINE, "the command to end", || process_gone(pid));
    h.fleet("b").cmd_ok(&["hosts", "forget", "b", "--force"]);
    h.fleet("b").wait_status(r1, "lost");
    h.assert_check_ok("b");
}

/// Host a is forgotten (`--force`, from host b) while its daemon runs a run of a namespace
/// with one seat, and the command ends right after the forget: a's write of that end is
/// refused, and a rejoins under a new epoch. The run's slot must go with it, as it would had
/// the end been written: the retry the forget queued, and every later run of the namespace,
/// start on a, with no restart of its daemon.
#[test]
fn a_refused_end_frees_the_seat_of_its_run_on_the_host_that_rejoins() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |dir| {
        // The first attempt waits at its gate; the retry and later runs end at once.
        let first = gated(dir);
        let cmd = sh(&format!(
            "if [ \"$FLEET_ATTEMPT\" = 1 ] && [ \"$FLEET_PROJECT\" = r ]; then {first}; fi; exit 0"
        ));
        format!(
            "max_concurrency = 4\n\
             [namespaces.rn]\nmax_concurrency = 1\n\
             [projects.r]\nnamespace = \"rn\"\nretries = 1\nretry_backoff = \"0s\"\n\
             command = {cmd}\n\
             [projects.later]\nnamespace = \"rn\"\ncommand = {cmd}\n"
        )
    }) else {
        return;
    };
    // Only a runs a daemon: b is where the operator types the forget.
    let a = h.start("a");
    let r1 = h.fleet("a").enqueue("r");
    h.fleet("a").wait_run(r1, "running with a pid", |r| {
        r["status"] == "running" && r["pid"].is_i64()
    });
    h.fleet("b").cmd_ok(&["hosts", "forget", "a", "--force"]);
    // The command ends now: before a's next heartbeat, as a rule, so the first write a makes
    // after the forget is this run's end, and that write is refused.
    release(h.shared(), r1);
    assert_eq!(status_of(&h.fleet("b").wait_terminal(r1)), "lost");
    let retry = || {
        h.runs()
            .into_iter()
            .find(|r| r["retry_of"].as_i64() == Some(r1))
    };
    h.wait_until(DEADLINE, "the forget to queue the retry", || {
        retry().is_some()
    });
    let r2 = id_of(&retry().unwrap());
    // The run's end was a's to write, refused: whatever a holds for the run goes all the same.
    // `fleet check` asks a's daemon for its slots: none may stay held for a run that ended.
    let check = h.fleet("a").cmd(&["check", "--json"]);
    assert!(
        !check.stdout.contains("slot_without_active_run"),
        "{check:?}\n{}",
        h.diagnostics()
    );
    let done = h.fleet("a").wait_terminal(r2);
    assert_eq!(status_of(&done), "succeeded", "{done}\n{}", h.diagnostics());
    assert_eq!(done["host"], "a", "{done}");
    let r3 = h.fleet("a").enqueue("later");
    let done = h.fleet("a").wait_terminal(r3);
    assert_eq!(status_of(&done), "succeeded", "{done}");
    let mut a = a;
    a.assert_alive();
    h.assert_check_ok("a");
}
