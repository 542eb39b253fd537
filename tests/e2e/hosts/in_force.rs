//! On a shared database, the commands that name projects and namespaces (`enqueue`, `rerun`,
//! `pause`) check them against the published config, the one every daemon applies — not
//! against the file of the host they are typed on, which may lag behind the fleet's or run
//! ahead of it.

use super::harness::*;
use crate::common::*;

#[test]
fn a_host_whose_file_differs_enqueues_by_the_published_config() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |_| {
        "[projects.new]\ncommand = [\"true\"]\n[namespaces.fresh]\nmax_concurrency = 1\n\
         [projects.fresh_job]\nnamespace = \"fresh\"\ncommand = [\"true\"]\n"
            .to_string()
    }) else {
        return;
    };
    // b's file is an older one: no `new`, no namespace `fresh`, and a project `old` since
    // removed from the fleet's.
    let b = h.fleet("b");
    let text = std::fs::read_to_string(&b.config).unwrap();
    let head: String = text
        .lines()
        .take_while(|l| !l.starts_with('['))
        .map(|l| format!("{l}\n"))
        .collect();
    b.write_config(&format!("{head}[projects.old]\ncommand = [\"true\"]\n"));
    // a's daemon publishes its file, then runs what is queued.
    let _a = h.start("a");
    h.wait_until(DEADLINE, "a's config published", || {
        b.status()["published_config_version"].as_i64() == Some(1)
    });

    let id: i64 = b.cmd_ok(&["enqueue", "new"]).trim().parse().unwrap();
    assert_eq!(status_of(&h.fleet("a").wait_terminal(id)), "succeeded");
    let rerun: i64 = b
        .cmd_ok(&["rerun", &id.to_string()])
        .trim()
        .parse()
        .unwrap();
    assert_eq!(status_of(&h.fleet("a").wait_terminal(rerun)), "succeeded");
    b.cmd_ok(&["pause", "fresh"]);
    b.cmd_ok(&["resume", "fresh"]);

    let out = b.cmd(&["enqueue", "old"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        "fleet: unknown project \"old\" (not in the config in force, version 1 published by host a)",
        "{out:?}"
    );
    // Its settings are the published ones too, and the message says where they come from.
    let out = b.cmd(&["enqueue", "new", "--", "extra"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains(
            "[projects.new] table, in the config in force, version 1 published by host a"
        ),
        "{out:?}"
    );
    // A project the fleet knows, with nothing to cancel: said so, not an unknown project.
    let out = b.cmd(&["cancel", "--project", "new", "--queued"]);
    assert_eq!(
        (out.code(), out.stdout.trim()),
        (Some(0), "nothing to cancel"),
        "{out:?}"
    );
    let out = b.cmd(&["pause", "old"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(
        out.stderr.contains("the config in force, version 1"),
        "{out:?}"
    );
}
