//! Another program writes a value fleet cannot read into an active run's row (arguments that
//! are not JSON, here): the daemon must go on for every other run, count that run's seat while
//! the row stays unreadable, and settle the run — with its real end — once the row is fixed.
//! The listings name the row instead of failing whole.

use crate::common::restart::*;
use crate::common::*;

/// Writes `args` of run `id` as another program would.
fn set_args(f: &Fleet, id: i64, args: Option<&str>) {
    let changed = outside_writer(f)
        .execute("UPDATE runs SET args = ?2 WHERE id = ?1", (id, args))
        .unwrap();
    assert_eq!(changed, 1);
}

/// Run `id`'s status as its row holds it (read directly: `fleet runs` leaves an unreadable row
/// out).
fn status_in_db(f: &Fleet, id: i64) -> String {
    outside_writer(f)
        .query_row("SELECT status FROM runs WHERE id = ?1", [id], |r| r.get(0))
        .unwrap()
}

/// Waits until run `id`'s row says `status`.
fn wait_db_status(f: &Fleet, id: i64, status: &str) {
    f.wait_until(DEADLINE, &format!("run {id} to be {status}"), || {
        status_in_db(f, id) == status
    });
}

/// Namespace `slow` (cap 1) runs `held`, gated, and `held2`; namespace `fast` runs `other`,
/// quick. A global cap of 3 leaves room for all but what `slow`'s cap holds back.
fn install() -> Fleet {
    Fleet::with(|dir| {
        format!(
            "max_concurrency = 3\ntick = \"200ms\"\n\
             [namespaces.slow]\nmax_concurrency = 1\n\
             [namespaces.fast]\nmax_concurrency = 2\n\
             [projects.held]\nnamespace = \"slow\"\ncommand = {}\n\
             [projects.held2]\nnamespace = \"slow\"\ncommand = {}\n\
             [projects.other]\nnamespace = \"fast\"\ncommand = {}\n",
            gated_command(
                &dir.join("held.start"),
                &dir.join("GO"),
                &dir.join("held.end"),
                3
            ),
            quick_command(&dir.join("held2.start")),
            quick_command(&dir.join("other.start")),
        )
    })
}

/// The row of a running run is made unreadable: `other` (another namespace) still starts and
/// ends, `held2` (held's namespace, cap 1) waits — held's seat is counted from what of its row
/// can be read — the shim's end waits for the row, and once the row is fixed the run ends with
/// its command's own exit code and `held2` goes. Red without the tolerant read of the active
/// rows (every EVAL fails: `other` never starts), and when an end that cannot be written fails
/// the whole EVAL (the later `other` never starts). Here the daemon's own slot counts `held`;
/// the next test shows the row's seat counted without one.
#[test]
fn failure3_a_running_run_whose_row_cannot_be_read_stops_no_other_run_and_keeps_its_seat() {
    let f = install();
    let d = f.start_daemon();
    let held = f.enqueue("held");
    f.wait_status(held, "running");
    set_args(&f, held, Some("not json"));
    let held2 = f.enqueue("held2");
    let other = f.enqueue("other");
    wait_db_status(&f, other, "succeeded");
    assert_eq!(status_in_db(&f, held2), "queued", "{}", f.diagnostics());
    assert!(d.stderr().contains("holds a value fleet cannot read"));

    // The listings go on past the row, and name it.
    let runs = f.cmd(&["runs"]);
    assert_eq!(runs.code(), Some(1), "{runs:?}");
    assert!(runs.stdout.contains("other"), "{runs:?}");
    assert!(
        runs.stderr
            .contains(&format!("run {held}: column args holds \"not json\"")),
        "{runs:?}"
    );
    let json = f.cmd(&["runs", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{json:?}");
    let report = check_report(&f);
    assert!(
        violation_kinds(&report).contains(&"unreadable_row"),
        "{report}"
    );

    // The command ends while the row cannot be read: its end waits, its seat still held.
    std::fs::write(f.file("GO"), "").unwrap();
    f.wait_until(DEADLINE, "held's command to end", || {
        !lines(&f.file("held.end")).is_empty()
    });
    eval_barrier(&f, 3);
    assert_eq!(status_in_db(&f, held), "running", "{}", f.diagnostics());
    assert_eq!(status_in_db(&f, held2), "queued", "{}", f.diagnostics());
    // The end that cannot be written stops no other run either.
    let later = f.enqueue("other");
    wait_db_status(&f, later, "succeeded");
    assert_eq!(status_in_db(&f, held), "running", "{}", f.diagnostics());

    set_args(&f, held, None);
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "failed", "{r}\n{}", f.diagnostics());
    assert_eq!(r["exit_code"], 3, "{r}");
    let r = f.wait_terminal(held2);
    assert_eq!(status_of(&r), "succeeded", "{r}\n{}", f.diagnostics());
    assert_eq!(lines(&f.file("held.start")).len(), 1);
    assert_check_ok(&f);
}

/// A daemon starts over a row left unreadable while no daemon ran (a run recorded `running`
/// by an earlier daemon): recovery goes on without it, `other` runs, `held2` waits behind its
/// seat, and the run is settled once the row is fixed. Red without the tolerant read in
/// recovery (it retries for ever and nothing is claimed), and when the packing does not count
/// the row's seat (the claim's own count in the database refuses `held2`, and says so).
#[test]
fn failure3_recovery_goes_on_past_a_row_it_cannot_read() {
    let f = install();
    let held = f.enqueue("held");
    let held2 = f.enqueue("held2");
    let other = f.enqueue("other");
    outside_writer(&f)
        .execute(
            "UPDATE runs SET status = 'running', claim_token = 7, epoch = 0, seat = 0, \
             started_at = enqueued_at, args = 'not json' WHERE id = ?1",
            [held],
        )
        .unwrap();
    let d = f.start_daemon();
    wait_db_status(&f, other, "succeeded");
    eval_barrier(&f, 2);
    assert_eq!(status_in_db(&f, held2), "queued", "{}", f.diagnostics());
    assert_eq!(status_in_db(&f, held), "running");
    assert!(d.stderr().contains("holds a value fleet cannot read"));
    // Held back by the packing itself, which counted the row's seat: not by the claim's own
    // count in the database, its last line of defence.
    assert!(
        !d.stderr().contains("claim refused: its cap is full"),
        "{}",
        d.stderr()
    );

    set_args(&f, held, None);
    // No shim ever ran it here: nothing says how it ended.
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "lost", "{r}\n{}", f.diagnostics());
    let r = f.wait_terminal(held2);
    assert_eq!(status_of(&r), "succeeded", "{r}\n{}", f.diagnostics());
    assert!(lines(&f.file("held.start")).is_empty());
}

/// An ended run's row made unreadable, no daemon running: `fleet runs` and `fleet projects` show
/// everything else and name the row on stderr (exit 1), `fleet check` reports it and checks the
/// rest. Red with the strict reads (each command fails whole, printing nothing).
#[test]
fn the_listings_name_an_ended_row_they_cannot_read_and_show_the_rest() {
    let f = install();
    let d = f.start_daemon();
    let broken = f.enqueue("other");
    f.wait_terminal(broken);
    let fine = f.enqueue("other");
    f.wait_terminal(fine);
    drop(d);
    outside_writer(&f)
        .execute(
            "UPDATE runs SET attempt = 5000000000 WHERE id = ?1",
            [broken],
        )
        .unwrap();
    let named = format!("run {broken}: column attempt holds 5000000000");

    let runs = f.cmd(&["runs", "--json"]);
    assert_eq!(runs.code(), Some(1), "{runs:?}");
    let listed: serde_json::Value = serde_json::from_str(&runs.stdout).unwrap();
    let ids: Vec<i64> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [fine], "{runs:?}");
    assert!(runs.stderr.contains(&named), "{runs:?}");

    // `broken` is not `other`'s last ended run: the projects listing has nothing to leave out.
    f.cmd_ok(&["projects"]);
    outside_writer(&f)
        .execute("UPDATE runs SET attempt = 5000000000 WHERE id = ?1", [fine])
        .unwrap();
    let projects = f.cmd(&["projects", "--json"]);
    assert_eq!(projects.code(), Some(1), "{projects:?}");
    let listed: serde_json::Value = serde_json::from_str(&projects.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3, "{projects:?}");
    assert!(
        projects
            .stderr
            .contains(&format!("run {fine}: column attempt holds 5000000000")),
        "{projects:?}"
    );

    let report = check_report(&f);
    assert_eq!(
        violation_kinds(&report),
        ["unreadable_row", "unreadable_row"],
        "{report}"
    );
    assert_eq!(report["checked"]["runs"], 2, "{report}");
}

/// Names that are not even text: SQLite stores whatever bytes another program casts to `TEXT`.
/// A queued run of such a project is never claimed and stops no other claim (red with the
/// queue heads read strictly: every EVAL fails). An active run of such a namespace could count
/// against any cap, and no name compares equal to it, in the packing nor in the claim's own
/// count: nothing is claimed until its row is fixed (red without that hold: `other` starts).
#[test]
fn failure3_names_that_are_not_text_stop_no_claim_or_hold_them_all() {
    let f = install();
    let _d = f.start_daemon();
    let first = f.enqueue("other");
    f.wait_terminal(first);
    // A queued row of project b"other\xff".
    let db = outside_writer(&f);
    db.execute(
        "INSERT INTO runs (project, namespace, status, trigger, enqueued_at) \
         VALUES (CAST(x'6f74686572ff' AS TEXT), 'fast', 'queued', 'manual', 1)",
        [],
    )
    .unwrap();
    let next = f.enqueue("other");
    wait_db_status(&f, next, "succeeded");
    drop(_d);

    // An active row of namespace b"fast\xff", left by an earlier daemon.
    let held = f.enqueue("held");
    db.execute(
        "UPDATE runs SET status = 'running', claim_token = 7, epoch = 0, seat = 0, \
         started_at = enqueued_at, namespace = CAST(x'66617374ff' AS TEXT) WHERE id = ?1",
        [held],
    )
    .unwrap();
    let d = f.start_daemon();
    let later = f.enqueue("other");
    eval_barrier(&f, 3);
    assert_eq!(status_in_db(&f, later), "queued", "{}", f.diagnostics());
    assert!(d.stderr().contains("not UTF-8 text"), "{}", d.stderr());

    db.execute("UPDATE runs SET namespace = 'slow' WHERE id = ?1", [held])
        .unwrap();
    wait_db_status(&f, later, "succeeded");
    // (`fleet runs` leaves the queued row of b"other\xff" out, and exits 1: read directly.)
    wait_db_status(&f, held, "lost");
}

/// Times another program wrote at the ends of the range: the listing shows no duration rather
/// than overflowing (red in a debug build: `fleet runs` panicked on the subtraction).
#[test]
fn times_at_the_ends_of_the_range_overflow_nothing() {
    let f = install();
    let d = f.start_daemon();
    let run = f.enqueue("other");
    f.wait_terminal(run);
    drop(d);
    outside_writer(&f)
        .execute(
            "UPDATE runs SET started_at = -9223372036854775808 WHERE id = ?1",
            [run],
        )
        .unwrap();
    let out = f.cmd(&["runs"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("other"), "{out:?}");
}

/// A queued row of a project the config no longer has, which cannot be read either: it stays
/// queued and stops nothing (red with the strict read of the removed projects' runs: every
/// EVAL fails on it).
#[test]
fn an_unreadable_queued_row_of_a_removed_project_stops_nothing() {
    let f = install();
    let run = f.enqueue("other");
    outside_writer(&f)
        .execute(
            "INSERT INTO runs (project, namespace, status, trigger, enqueued_at, args) \
             VALUES ('gone', 'default', 'queued', 'manual', 1, 'not json')",
            [],
        )
        .unwrap();
    let _d = f.start_daemon();
    wait_db_status(&f, run, "succeeded");
}

/// `fleet wait` on a run whose row another program breaks while it runs: it says so once and
/// waits on, and exits with the command's own code once the row is fixed (red before: it
/// exited 1 at once, which reads as a run lost or cancelled).
#[test]
fn fleet_wait_waits_on_a_row_it_cannot_read() {
    let f = install();
    let _d = f.start_daemon();
    let held = f.enqueue("held");
    f.wait_status(held, "running");
    set_args(&f, held, Some("not json"));
    let err = f.file("wait.err");
    let mut waiter = f
        .command()
        .args(["wait", &held.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    f.wait_until(DEADLINE, "fleet wait to say it waits on", || {
        std::fs::read_to_string(&err)
            .unwrap_or_default()
            .contains("still waiting")
    });
    assert!(waiter.try_wait().unwrap().is_none(), "fleet wait exited");
    std::fs::write(f.file("GO"), "").unwrap();
    set_args(&f, held, None);
    let mut status = None;
    f.wait_until(DEADLINE, "fleet wait to exit", || {
        status = waiter.try_wait().unwrap();
        status.is_some()
    });
    assert_eq!(status.unwrap().code(), Some(3), "the command's own code");
}
