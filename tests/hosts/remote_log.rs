//! `fleet logs` of a run still running on another host, whose daemon listens on port 0: the
//! address it publishes is the one bound (the port chosen), so the log is read through it.

use crate::common::*;
use crate::harness::*;

#[test]
fn a_running_runs_log_is_read_from_a_host_listening_on_port_zero() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |dir| {
        let gate = shell_quote(&dir.join("go"));
        format!(
            "max_concurrency = 2\n[projects.p]\ncommand = {}\n",
            sh(&format!(
                "echo hello from $FLEET_RUN_ID; while [ ! -e {gate} ]; do sleep 0.05; done"
            ))
        )
    }) else {
        return;
    };
    let b = h.fleet("b");
    let text = std::fs::read_to_string(&b.config).unwrap();
    b.write_config(&format!("http_listen = \"127.0.0.1:0\"\n{text}"));
    // Only b runs a daemon: the run is b's; a only reads the shared database.
    let _db = h.start("b");
    let id = h.fleet("a").enqueue("p");
    h.wait_until(DEADLINE, "the run running on b", || {
        let r = h.fleet("a").run(id);
        status_of(&r) == "running" && r["host"].as_str() == Some("b")
    });
    h.wait_until(DEADLINE, "a reading the running run's log from b", || {
        let out = h.fleet("a").cmd(&["logs", &id.to_string()]);
        out.code() == Some(0) && out.stdout.contains(&format!("hello from {id}"))
    });
    std::fs::write(h.shared().join("go"), "").unwrap();
    h.fleet("a").wait_terminal(id);
}
