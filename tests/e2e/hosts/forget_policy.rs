//! `fleet hosts forget` on a shared database decides the forgotten runs' retries by the
//! published config in force, not by the local file of the host it is typed on (which may
//! differ); and a second forget of a forgotten host writes nothing.

use super::harness::*;
use crate::common::*;

#[test]
fn forget_retries_by_the_published_config_not_the_local_file() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |_| {
        "[projects.p]\ncommand = [\"sleep\", \"120\"]\nretries = 1\n".to_string()
    }) else {
        return;
    };
    // Host a starts first: nothing is published, so it publishes its file (retries = 1).
    let a = h.start("a");
    h.wait_until(DEADLINE, "host a to publish its config", || {
        h.sql()
            .query_opt("SELECT 1 FROM published_config", &[])
            .is_ok_and(|r| r.is_some())
    });
    drop(a);
    // Host b's local file says no retries; the published config in force says one.
    let b = h.fleet("b");
    let local = std::fs::read_to_string(&b.config).unwrap();
    let differing = local.replace("retries = 1", "retries = 0");
    assert_ne!(local, differing);
    b.replace_config(&differing);
    let mut daemon = h.start("b");
    let id = b.enqueue("p");
    let run = b.wait_status(id, "running");
    assert_eq!(host_of(&run), "b", "{run}");
    // Host b's daemon dies; its run is forgotten from b's own command line.
    daemon.kill();
    let out = b.cmd_ok(&["hosts", "forget", "b", "--force"]);
    assert!(
        out.contains(&format!("runs lost: {id};")) && !out.contains("retries queued: none"),
        "forget took the local file's retries (0), not the published config's (1):\n{out}\n{}",
        h.diagnostics()
    );
    // Forgotten already: said so, exit 0, nothing written (the epoch stays).
    let epoch = |h: &Hosts| h.host_row("a", "b").unwrap()["epoch"].clone();
    let before = epoch(&h);
    let again = b.cmd_ok(&["hosts", "forget", "b", "--force"]);
    assert!(
        again.contains("host b was already forgotten at "),
        "{again}"
    );
    assert_eq!(epoch(&h), before);
}
