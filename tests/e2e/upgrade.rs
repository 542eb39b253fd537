//! The upgrade path from the first stable run-file format: a copy of `tests/fixtures/v0.1.0/`,
//! the install fleet 0.1.0 left (its README says what it holds and how it was made), is read by
//! the version under test as it is, then taken over by its daemon, which settles the run whose
//! shim died with the old daemon and runs the queued one.

use std::path::Path;

use crate::common::*;

/// The fixture: fleet.toml and the state directory of fleet 0.1.0.
const V0_1_0: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v0.1.0");

/// A fleet on a copy of the fixture at `fixture`: its fleet.toml, and its `.fleet/` as the
/// state directory.
fn fleet_on(fixture: &Path) -> Fleet {
    let toml = std::fs::read_to_string(fixture.join("fleet.toml")).unwrap();
    let f = Fleet::new(&toml);
    copy_tree(&fixture.join(".fleet"), &f.state_dir());
    f
}

/// Copies the folder `from` to `to`, which must not exist, files and subfolders.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Each run as (id, status, exit code), by id.
fn ends(f: &Fleet) -> Vec<(i64, String, Option<i64>)> {
    let mut runs: Vec<_> = f
        .runs()
        .iter()
        .map(|r| {
            let id = r["id"].as_i64().unwrap();
            (id, status_of(r).to_string(), r["exit_code"].as_i64())
        })
        .collect();
    runs.sort();
    runs
}

/// The violations `fleet check --json` reports, as (kind, run id).
fn violations(f: &Fleet) -> Vec<(String, Option<i64>)> {
    let out = f.cmd(&["check", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("fleet check --json: {e}: {out:?}"));
    report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["kind"].as_str().unwrap().to_string(),
                v["run_id"].as_i64(),
            )
        })
        .collect()
}

#[test]
fn an_install_of_v0_1_0_is_read_and_taken_over() {
    let f = fleet_on(Path::new(V0_1_0));

    // Read as it is, no daemon running.
    assert_eq!(
        ends(&f),
        vec![
            (1, "succeeded".into(), Some(0)),
            (2, "succeeded".into(), Some(0)),
            (3, "failed".into(), Some(3)),
            (4, "running".into(), None),
            (5, "queued".into(), None),
        ]
    );
    assert_eq!(f.logs(1), "requeued ran\n");
    assert_eq!(f.logs(2), "hello from v0.1.0\n");
    assert_eq!(f.logs(3), "about to fail\n");
    assert_eq!(f.logs(4), "long began\n");
    // Run 1's records hold its first claim's tombstone, then its second claim's end; run 4's
    // say it started and ran, and nothing more.
    let one = run_records(&f, 1);
    let exit = one.exit.expect("run 1's exit record");
    assert_eq!((exit.code, one.tombstones.len()), (Some(0), 1));
    assert_ne!(
        one.tombstones[0], exit.token,
        "the tombstone is the first claim's"
    );
    let four = run_records(&f, 4);
    assert!(four.started.is_some() && four.running.is_some() && four.exit.is_none());
    assert!(one.bad.is_empty() && four.bad.is_empty());
    // The one thing wrong: run 4 is active, and no shim holds it any more.
    assert_eq!(
        violations(&f),
        vec![("active_without_shim".to_string(), Some(4))]
    );

    // Taken over: run 4's shim is gone without an exit record, so its end is unknown (`lost`,
    // no retries in its project); the queued run runs.
    let _d = f.start_daemon();
    let four = f.wait_terminal(4);
    assert_eq!(status_of(&four), "lost", "{four}");
    assert_eq!(
        four["reason"], "the shim died without recording the command's end",
        "{four}"
    );
    let five = f.wait_terminal(5);
    assert_eq!(
        (status_of(&five), five["exit_code"].as_i64()),
        ("succeeded", Some(0)),
        "{five}"
    );
    assert_eq!(f.logs(5), "later ran\n");
    // The runs that had ended are as they were, and nothing else was queued.
    assert_eq!(
        ends(&f),
        vec![
            (1, "succeeded".into(), Some(0)),
            (2, "succeeded".into(), Some(0)),
            (3, "failed".into(), Some(3)),
            (4, "lost".into(), None),
            (5, "succeeded".into(), Some(0)),
        ]
    );
    assert_check_ok(&f);

    // New runs are numbered after the old ones, beside their files.
    let six = f.enqueue("greet");
    assert_eq!(six, 6);
    assert_eq!(status_of(&f.wait_terminal(six)), "succeeded");
    assert_eq!(f.logs(six), "hello from v0.1.0\n");
    assert_check_ok(&f);
}
