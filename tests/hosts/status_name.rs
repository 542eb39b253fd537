//! `fleet status` on a host whose daemon was started with `--host NAME` (the file naming no
//! host, or another): it finds that daemon by the state directory's lock and shows its name,
//! running, not "taking over".

use std::process::{Child, Stdio};

use crate::common::*;
use crate::harness::*;

/// Kills the daemon it holds when dropped (a failed test leaves nothing running).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn status_names_a_daemon_started_with_a_host_flag() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a"], |_| {
        "max_concurrency = 2\n[projects.p]\ncommand = [\"true\"]\n".to_string()
    }) else {
        return;
    };
    let f = h.fleet("a");
    // The file names host "a"; the daemon runs as "b", as `--host` allows.
    let log = std::fs::File::create(f.file("daemon-b.stderr")).unwrap();
    let _daemon = Killed(
        f.command()
            .args(["daemon", "--host", "b"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start fleet daemon --host b"),
    );
    h.wait_until(DEADLINE, "status to show host b running", || {
        let s = f.status();
        s["host"].as_str() == Some("b")
            && s["daemon"]["running"] == serde_json::Value::Bool(true)
            && s["daemon"]["taking_over"].as_bool() != Some(true)
            && s["daemon"]["state"].as_str() == Some("running")
    });
}
