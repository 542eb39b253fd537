//! A reloaded `tick` takes effect (docs/CONFIG.md: "From the next EVAL").

use std::time::Duration;

use crate::common::*;

/// Start with a one-hour tick, reload to 200 ms, then enqueue a run whose nudge cannot reach the
/// daemon (control socket removed): only the new, short tick can start it.
#[test]
fn a_reloaded_tick_takes_effect() {
    let f = Fleet::new("tick = \"1h\"\nmax_concurrency = 4\n[projects.p]\ncommand = [\"true\"]\n");
    let _d = f.start_daemon();
    f.write_config("tick = \"200ms\"\nmax_concurrency = 5\n[projects.p]\ncommand = [\"true\"]\n");
    f.cmd_ok(&["reload"]);
    // The reload is applied once the daemon's recorded caps show the new global cap.
    f.wait_until(DEADLINE, "the reload to be applied", || {
        f.status()["global"]["max_concurrency"] == 5
    });
    assert!(f.status()["daemon"]["last_reload_error"].is_null());
    let sock = f.state_dir().join("daemon.sock");
    std::fs::remove_file(&sock)
        .unwrap_or_else(|e| panic!("removing the control socket {}: {e}", sock.display()));
    let id = f.enqueue("p");
    f.wait_until(
        Duration::from_secs(30),
        "the 200 ms tick to start a run nobody nudged about",
        || f.run(id)["status"] == "succeeded",
    );
}
