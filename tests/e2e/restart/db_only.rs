//! Runs only the database knows: it records them as active, and the restarted daemon's slot pool
//! cannot hold them, because recovery could not settle them (their run files cannot be
//! read). The packers must count them all the same — they see
//! merge(pool, DB running set), never the pool alone — with and without namespaces. Adopted runs
//! cannot show this: recovery puts them in the pool. And a run recovery could not settle is
//! settled again, until it is, once its files can be written.

use crate::common::restart::*;
use crate::common::*;

/// Makes run `id` active in the database (another writer did it: a restored backup, say) with
/// records that cannot be read (a folder stands where its overflow file goes), so that no
/// recovery can read them.
fn db_only_active_run(f: &Fleet, id: i64) {
    let db = rusqlite::Connection::open(f.state_dir().join("fleet.db")).unwrap();
    db.execute(
        "UPDATE runs SET status = 'running', claim_token = 7, started_at = 1 WHERE id = ?1",
        [id],
    )
    .unwrap();
    let runs = f.state_dir().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::create_dir_all(runs.join(format!("{id}.more"))).unwrap();
}

/// The namespace packer: a run only the database knows fills namespace `ops` (cap 1), so its
/// sibling stays queued, while a run of another namespace goes through (proof that the EVALs
/// that left the sibling queued did run). Goes red if the namespace packer is handed the pool
/// alone (the zero-namespace case is `failure1_db_active_run_unknown_to_the_pool_still_counts`).
#[test]
fn failure1_with_namespaces_db_active_run_unknown_to_the_pool_still_counts() {
    let f = Fleet::new(
        "max_concurrency = 4\n\
         [namespaces.ops]\nmax_concurrency = 1\n\
         [projects.held]\nnamespace = \"ops\"\ncommand = [\"true\"]\n\
         [projects.sibling]\nnamespace = \"ops\"\ncommand = [\"true\"]\n\
         [projects.free]\ncommand = [\"true\"]\n",
    );
    let held = f.enqueue("held");
    db_only_active_run(&f, held);
    let _d = f.start_daemon();
    let sibling = f.enqueue("sibling");
    let free = f.enqueue("free");
    let r = f.wait_terminal(free);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_stays_queued(
        &f,
        sibling,
        "namespace ops (cap 1) is taken by a run only the database knows",
    );
    assert_eq!(status_of(&f.run(held)), "running");
    let s = f.status();
    assert_eq!(s["namespaces"]["ops"]["active"], 1, "{s}");
}

/// A run claimed by a real daemon that died before spawning its shim; the next daemon's
/// recovery cannot read the run's records (a folder stands where its overflow file goes, and
/// every read of it fails as on a failing disk), so it may neither requeue nor adopt the run:
/// the run stays `starting`, in no slot. Under namespaces, it must still fill namespace `ops`;
/// under the global cap too. Then the records can be read again: the run is settled at a later
/// try (tombstoned, requeued as the same attempt) and runs once.
///
/// Red if the packers see the pool alone (the sibling starts), or if recovery gives up on a run
/// it could not settle (the run stays `starting` for good).
#[test]
fn failure1_claimed_run_recovery_cannot_settle_still_counts_and_is_settled_later() {
    let f = Fleet::with(|dir| {
        format!(
            "max_concurrency = 2\n\
             [namespaces.ops]\nmax_concurrency = 1\n\
             [projects.held]\nnamespace = \"ops\"\ncommand = {}\n\
             [projects.sibling]\nnamespace = \"ops\"\ncommand = {}\n\
             [projects.free]\ncommand = {}\n\
             [projects.free2]\ncommand = {}\n",
            quick_command(&dir.join("held.start")),
            quick_command(&dir.join("sibling.start")),
            gated_command(
                &dir.join("free.start"),
                &dir.join("GO"),
                &dir.join("free.end"),
                0
            ),
            quick_command(&dir.join("free2.start")),
        )
    });
    let mut d1 = f.start_daemon_env(&[("FAILPOINTS", "daemon-after-claim=return")]);
    let held = f.enqueue("held");
    wait_daemon_abort(&f, &mut d1, held, "the daemon to abort after the claim");
    assert_eq!(status_of(&f.run(held)), "starting");
    let unreadable = f.state_dir().join("runs").join(format!("{held}.more"));
    std::fs::create_dir_all(&unreadable).unwrap();

    wait_daemon_lock_released(&f.state_dir());
    let d2 = f.start_daemon();
    let sibling = f.enqueue("sibling");
    // `free` takes the second seat of the global cap (2) and holds it until GO.
    let free = f.enqueue("free");
    f.wait_status(free, "running");
    let free2 = f.enqueue("free2");
    assert_stays_queued(
        &f,
        sibling,
        "namespace ops (cap 1) is taken by a claimed run recovery could not settle",
    );
    assert_stays_queued(
        &f,
        free2,
        "the global cap (2) is taken by `free` and the run only the database knows",
    );
    assert_eq!(status_of(&f.run(held)), "starting");
    assert!(!f.file("held.start").exists(), "the held run never started");
    let log = d2.stderr();
    assert!(
        log.contains("settling them again later"),
        "the daemon should say it will settle the run again:\n{log}"
    );

    // The records can be read again: the next try settles the claim, and requeues it.
    std::fs::remove_dir(&unreadable).unwrap();
    f.wait_run(held, "the claim settled and requeued", |r| {
        r["status"] != "starting"
    });
    std::fs::write(f.file("GO"), "").unwrap();
    let r = f.wait_terminal(held);
    assert_eq!(status_of(&r), "succeeded", "{r}");
    assert_eq!(r["attempt"], 1, "requeued as the same attempt: {r}");
    assert_eq!(lines(&f.file("held.start")).len(), 1);
    assert!(
        requeues(&f).contains(&held),
        "recovery's second try requeued the claim"
    );
    for id in [sibling, free, free2] {
        let r = f.wait_terminal(id);
        assert_eq!(status_of(&r), "succeeded", "{r}");
    }
    for name in ["sibling.start", "free.start", "free2.start"] {
        assert_eq!(lines(&f.file(name)).len(), 1, "{name}");
    }
    assert_eq!(f.runs().len(), 4, "no retry or extra run: {:#?}", f.runs());
    assert_check_ok(&f);
}
