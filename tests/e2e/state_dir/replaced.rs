//! A daemon's state directory, database and lock are the files it opened, not whatever is at
//! their paths now. When one of them is removed or replaced under a running daemon (`rm -rf
//! .fleet`, a directory moved into its place, a copy of the database renamed over it, a backup
//! restored into it), the daemon notices within a tick, logs what changed and exits 1 — instead
//! of working on files nobody reads while the runs queued in the new ones wait forever.

use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// How long a daemon may take to notice: its tick is 1 s; the rest is a noisy 2-core machine.
const NOTICE_WITHIN: Duration = Duration::from_secs(20);

fn fleet() -> Fleet {
    Fleet::new("[projects.p]\ncommand = [\"true\"]\n")
}

/// Waits until the daemon exits; asserts it took less than [`NOTICE_WITHIN`] after `since`.
fn wait_exit(f: &Fleet, d: &mut Daemon, since: Instant) -> ExitStatus {
    f.wait_until(DEADLINE, "the daemon to notice and exit", || {
        d.try_exit().is_some()
    });
    let took = since.elapsed();
    eprintln!("the daemon exited {took:?} after the change");
    assert!(
        took < NOTICE_WITHIN,
        "the daemon took {took:?} to notice:\n{}",
        d.stderr()
    );
    d.exited().unwrap()
}

/// Asserts the daemon exited 1 and its log says, naming the state directory, what it saw.
fn assert_stopped_saying(f: &Fleet, d: &Daemon, status: ExitStatus, words: &str) {
    assert_stopped(d, status, words, &f.state_dir().display().to_string());
}

/// Asserts the daemon exited 1 and its log says, at ERROR, `words` and `dir`.
fn assert_stopped(d: &Daemon, status: ExitStatus, words: &str, dir: &str) {
    let log = d.stderr();
    assert_eq!(status.code(), Some(1), "exit status {status}:\n{log}");
    let said = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains(words) && l.contains(dir));
    assert!(
        said.is_some(),
        "the daemon's log should say, at ERROR and naming {dir}, {words:?}:\n{log}"
    );
}

/// A copy of the database as it is now (SQLite's own `VACUUM INTO`: consistent, WAL included).
fn back_up(f: &Fleet, to: &Path) {
    f.db()
        .execute("VACUUM INTO ?1", [to.to_str().unwrap()])
        .expect("VACUUM INTO");
}

#[test]
fn removing_the_state_directory_stops_the_daemon() {
    let f = fleet();
    let mut d = f.start_daemon();
    let first = f.enqueue("p");
    assert_eq!(status_of(&f.wait_terminal(first)), "succeeded");

    std::fs::remove_dir_all(f.state_dir()).expect("rm -rf .fleet");
    let at = Instant::now();
    // The next command makes a new, empty state directory, and queues a run in it.
    let queued = f.enqueue("p");
    let status = wait_exit(&f, &mut d, at);
    assert_stopped_saying(&f, &d, status, "the state directory was");
    assert_eq!(
        f.status()["daemon"]["running"],
        Value::Bool(false),
        "no daemon holds the new state directory"
    );

    // Started again (as a supervisor would), a daemon runs what waits in the new directory.
    let _again = f.start_daemon();
    assert_eq!(status_of(&f.wait_terminal(queued)), "succeeded");
}

#[test]
fn a_directory_moved_into_place_stops_the_daemon() {
    let f = fleet();
    let mut d = f.start_daemon();
    let first = f.enqueue("p");
    assert_eq!(status_of(&f.wait_terminal(first)), "succeeded");

    std::fs::create_dir(f.file("other")).unwrap();
    std::fs::rename(f.state_dir(), f.file("old")).unwrap();
    std::fs::rename(f.file("other"), f.state_dir()).unwrap();
    let at = Instant::now();
    let status = wait_exit(&f, &mut d, at);
    assert_stopped_saying(&f, &d, status, "the state directory was replaced");

    let _again = f.start_daemon();
    let id = f.enqueue("p");
    assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
}

#[test]
fn a_database_renamed_over_fleet_db_stops_the_daemon() {
    let f = fleet();
    f.enqueue("p");
    let backup = f.file("backup.db");
    back_up(&f, &backup);
    let mut d = f.start_daemon();

    // A careful copy: written beside it, then renamed over it in one step.
    let tmp = f.state_dir().join("fleet.db.restoring");
    std::fs::copy(&backup, &tmp).unwrap();
    std::fs::rename(&tmp, f.state_dir().join("fleet.db")).unwrap();
    let at = Instant::now();
    let status = wait_exit(&f, &mut d, at);
    assert_stopped_saying(&f, &d, status, "fleet.db was replaced");
}

#[test]
fn a_backup_restored_into_the_database_stops_the_daemon() {
    let f = fleet();
    f.enqueue("p");
    let backup = f.file("backup.db");
    back_up(&f, &backup);
    let mut d = f.start_daemon();

    // Restored by SQLite itself, in place: same file, same inode, older content.
    let mut db = f.db();
    db.restore(
        rusqlite::MAIN_DB,
        &backup,
        None::<fn(rusqlite::backup::Progress)>,
    )
    .expect("restore the backup");
    drop(db);
    let at = Instant::now();
    let status = wait_exit(&f, &mut d, at);
    // Seen at a tick, or by the first write of an EVAL (which has no state directory to name).
    assert_stopped(&d, status, "older than this daemon's epoch", "");
}

#[test]
fn removing_the_daemon_lock_stops_the_daemon() {
    let f = fleet();
    let mut d = f.start_daemon();
    // Without its lock file, a second daemon could take the state directory beside this one.
    std::fs::remove_file(f.state_dir().join("daemon.lock")).unwrap();
    let at = Instant::now();
    let status = wait_exit(&f, &mut d, at);
    assert_stopped_saying(&f, &d, status, "daemon.lock was removed");
}

/// A file where the state directory should be is bad input: `fleet status` exits 2 with one
/// line naming it.
#[test]
fn status_with_a_file_for_the_state_directory_exits_2() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    let file = f.file("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let out = f.cmd(&["--state-dir", &file.display().to_string(), "status"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert_eq!(out.stderr.trim().lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("not a directory"), "{out:?}");
}

/// A backup restored as OPERATIONS.md says (daemon stopped, the file replaced, its `-wal` and
/// `-shm` removed) is older than the run files here: the daemon started on it numbers new
/// runs above every run with files, so a new run never shares the id — the lock file, the
/// records and the log — of a run the restored database no longer knows.
#[test]
fn after_a_restore_new_runs_are_numbered_above_the_run_files() {
    let f = Fleet::new("[projects.p]\ncommand = [\"sh\", \"-c\", \"echo run $FLEET_RUN_ID\"]\n");
    let run = |f: &Fleet| {
        let id = f.enqueue("p");
        assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
        id
    };
    let mut d = f.start_daemon();
    let first = run(&f);
    d.kill();
    let backup = f.file("backup.db");
    back_up(&f, &backup);
    let mut d = f.start_daemon();
    let lost: Vec<i64> = (0..2).map(|_| run(&f)).collect();
    // A start on a database that knows the last epoch (no restore yet) moves nothing.
    assert!(
        !d.stderr().contains("already ran under epoch"),
        "{}",
        d.stderr()
    );
    d.kill();
    let log = |id: i64| std::fs::read_to_string(f.state_dir().join(format!("runs/{id}.log")));
    assert_eq!(log(lost[1]).unwrap(), format!("run {}\n", lost[1]));

    let db = f.state_dir().join("fleet.db");
    std::fs::copy(&backup, &db).unwrap();
    for extra in ["fleet.db-wal", "fleet.db-shm"] {
        let _ = std::fs::remove_file(f.state_dir().join(extra));
    }
    let d = f.start_daemon();
    let new = run(&f);
    assert_eq!(
        new,
        lost[1] + 1,
        "the restored database (runs up to {first}) numbered a new run inside the lost ones"
    );
    assert_eq!(log(new).unwrap(), format!("run {new}\n"));
    assert_eq!(
        log(lost[1]).unwrap(),
        format!("run {}\n", lost[1]),
        "a lost run's log changed"
    );
    assert!(
        d.stderr()
            .contains(&format!("new runs are numbered from {}", lost[1] + 1)),
        "{}",
        d.stderr()
    );
}

/// A backup that still queued runs which have run since: restored, those runs are claimed
/// again, and their files say their commands were started already, and how they ended. Each
/// run ends as its command did — from its records, exit code included — instead of starting
/// the command a second time or being retried; its log is not written to again; `fleet check`
/// finds nothing wrong; and the daemon started on the restored database takes an epoch above
/// the one of the daemon that ran after the backup.
#[test]
fn after_a_restore_a_run_that_ran_since_the_backup_ends_as_it_did() {
    let f = Fleet::new(
        "[projects.p]\nmax_parallel = 4\nretries = 1\nretry_backoff = \"0s\"\n\
         command = [\"sh\", \"-c\", \"echo run $FLEET_RUN_ID; exit $(( FLEET_RUN_ID % 2 * 3 ))\"]\n",
    );
    let ids: Vec<i64> = (0..3).map(|_| f.enqueue("p")).collect();
    let ended = |f: &Fleet, id: i64| {
        let expected = if id % 2 == 1 {
            ("failed", 3)
        } else {
            ("succeeded", 0)
        };
        let run = f.wait_terminal(id);
        assert_eq!(
            (status_of(&run), run["exit_code"].as_i64()),
            (expected.0, Some(expected.1)),
            "{run}"
        );
    };
    // The backup holds them queued.
    let backup = f.file("backup.db");
    back_up(&f, &backup);
    let mut d = f.start_daemon();
    for &id in &ids {
        ended(&f, id);
    }
    // The failed ones' retries run too, then the daemon stops.
    for r in f.runs() {
        f.wait_terminal(r["id"].as_i64().unwrap());
    }
    let epoch_after_backup = f
        .db()
        .query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap();
    d.kill();
    let db = f.state_dir().join("fleet.db");
    std::fs::copy(&backup, &db).unwrap();
    for extra in ["fleet.db-wal", "fleet.db-shm"] {
        let _ = std::fs::remove_file(f.state_dir().join(extra));
    }
    let d = f.start_daemon();
    for &id in &ids {
        ended(&f, id);
        assert_eq!(
            std::fs::read_to_string(f.state_dir().join(format!("runs/{id}.log"))).unwrap(),
            format!("run {id}\n"),
            "run {id}'s command ran again"
        );
    }
    // Nothing else is queued: not even a retry of the runs that failed — it was decided with
    // their ends, in the history the restored database lost, and ran then.
    let after = f.runs();
    let mut listed: Vec<i64> = after.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    listed.sort();
    assert_eq!(listed, ids, "{after:?}");
    for r in &after {
        assert!(
            r["reason"]
                .as_str()
                .is_some_and(|n| n.contains("not started again")),
            "{r}"
        );
    }
    let epoch: i64 = f
        .db()
        .query_row("SELECT epoch FROM hosts", [], |r| r.get(0))
        .unwrap();
    assert!(
        d.stderr().contains(&format!(
            "a daemon here already ran under epoch {epoch_after_backup}"
        )),
        "{}",
        d.stderr()
    );
    assert!(
        epoch > epoch_after_backup,
        "the daemon on the restored database took epoch {epoch}, already held by one that ran after the backup (up to {epoch_after_backup})"
    );
    // What `fleet check` finds is the files of the retries the restored database lost (runs
    // 4 and 5, one per failed run), as after any restore, and nothing else.
    let out = f.cmd(&["check", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("check's JSON");
    let found: Vec<(String, i64)> = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["kind"].as_str().unwrap().to_string(),
                v["run_id"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("folder_without_run".to_string(), 4),
            ("folder_without_run".to_string(), 5)
        ],
        "{out:?}"
    );
    drop(d);
}

/// A stray file whose name is a run id far past any backup's lag (the largest id there is) is
/// not numbered past, and does not hide the files of runs a restored database lost: runs are
/// numbered above those, and can be queued.
#[test]
fn a_stray_run_file_with_a_huge_id_is_not_numbered_past() {
    let f = fleet();
    let first = f.enqueue("p");
    let runs = f.state_dir().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::write(runs.join(format!("{}.more", i64::MAX)), "").unwrap();
    std::fs::write(runs.join("5000000000.log"), "").unwrap();
    // A run the database does not know (lost with a restore): numbered past.
    std::fs::write(runs.join(format!("{}.more", first + 5)), "").unwrap();
    let d = f.start_daemon();
    assert_eq!(status_of(&f.wait_terminal(first)), "succeeded");
    let next = f.enqueue("p");
    assert_eq!(next, first + 6);
    assert_eq!(status_of(&f.wait_terminal(next)), "succeeded");
    assert!(
        d.stderr()
            .contains("taken for a stray file, not numbered past"),
        "{}",
        d.stderr()
    );
}
