//! `fleet status` on a host whose daemon was started with `--host NAME` (the file naming no
//! host, or another): it finds that daemon by the state directory's lock and shows its name,
//! running, not "taking over"; and on a host with no daemon running, the published caps.

use std::process::{Child, Stdio};

use super::harness::*;
use crate::common::*;

/// Kills the daemon it holds when dropped (a failed test leaves nothing running).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One host whose file names it "a", with one project of `true`, and a capacity of its own
/// for host "b" (3) but none for "a".
fn host_a() -> Option<Hosts> {
    Hosts::new(&["a"], |_| {
        "max_concurrency = 2\n[hosts.b]\nmax_concurrency = 3\n\
         [projects.p]\ncommand = [\"true\"]\n"
            .to_string()
    })
}

/// Starts `fleet daemon --host b` for `f`, whose file names host "a".
fn daemon_as_b(f: &Fleet) -> Killed {
    let log = std::fs::File::create(f.file("daemon-b.stderr")).unwrap();
    Killed(
        f.command()
            .args(["daemon", "--host", "b"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start fleet daemon --host b"),
    )
}

#[test]
fn status_names_a_daemon_started_with_a_host_flag() {
    use_private_bin();
    let Some(h) = host_a() else {
        return;
    };
    let f = h.fleet("a");
    // The file names host "a"; the daemon runs as "b", as `--host` allows.
    let _daemon = daemon_as_b(f);
    h.wait_until(DEADLINE, "status to show host b running", || {
        let s = f.status();
        s["host"].as_str() == Some("b")
            && s["daemon"]["running"] == serde_json::Value::Bool(true)
            && s["daemon"]["taking_over"].as_bool() != Some(true)
            && s["daemon"]["state"].as_str() == Some("running")
    });
}

/// The same daemon gone (killed): the commands still know this state directory as host b's —
/// `status` names it, `prune` prunes b's runs, `check` checks b's run files — not the file's
/// `a`, which would show none of b's runs as this host's.
#[test]
fn commands_know_the_host_a_gone_daemon_ran_as() {
    use_private_bin();
    let Some(h) = host_a() else {
        return;
    };
    let f = h.fleet("a");
    let daemon = daemon_as_b(f);
    let id = f.enqueue("p");
    assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    drop(daemon);
    h.wait_until(DEADLINE, "the daemon to be gone", || {
        f.status()["daemon"]["running"] == serde_json::Value::Bool(false)
    });
    assert_eq!(f.status()["host"].as_str(), Some("b"), "{}", f.status());
    // And b's own capacity, not a's (which has none).
    assert_eq!(
        f.status()["host_capacity"],
        serde_json::json!({"name": "b", "active": 0, "max_concurrency": 3}),
        "{}",
        f.status()
    );
    let out = f.cmd_ok(&["prune", "--dry-run"]);
    assert!(out.contains("host b:"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&f.cmd(&["check", "--json"]).stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(
        report["checked"]["run_dirs"], 1,
        "b's run files are checked: {report}"
    );
}

/// `fleet status` on a host whose daemon is not running shows the caps of the config the fleet
/// has published (what every other host applies, and what its own daemon will apply when it
/// starts), not those of a local file that differs, which it flags.
#[test]
fn status_without_a_daemon_shows_the_published_caps() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a", "b"], |_| {
        "max_concurrency = 2\n[namespaces.ops]\nmax_concurrency = 1\n\
         [projects.p]\ncommand = [\"true\"]\nnamespace = \"ops\"\n"
            .to_string()
    }) else {
        return;
    };
    // a's daemon publishes the first version, then stops; b never runs one.
    let mut daemon = h.start("a");
    h.wait_until(DEADLINE, "a version published", || {
        h.fleet("b").status()["published_config_version"].as_i64() == Some(1)
    });
    daemon.kill();
    let b = h.fleet("b");
    let text = std::fs::read_to_string(&b.config).unwrap();
    b.write_config(
        &text
            .replace("max_concurrency = 2", "max_concurrency = 9")
            .replace("max_concurrency = 1", "max_concurrency = 7"),
    );
    let s = b.status();
    assert_eq!(
        s["daemon"]["running"],
        serde_json::Value::Bool(false),
        "{s}"
    );
    assert_eq!(
        s["local_config_differs"],
        serde_json::Value::Bool(true),
        "{s}"
    );
    assert_eq!(s["global"]["max_concurrency"], 2, "{s}");
    assert_eq!(s["namespaces"]["ops"]["max_concurrency"], 1, "{s}");
}

/// `--state-dir` of a host of a shared database, with a config that cannot be read: the folder
/// alone cannot say how to connect, so every command that reads the database refuses (exit 2),
/// naming the database its daemon used — never an install with no runs, which `fleet check`
/// would call ok.
#[test]
fn state_dir_alone_of_a_shared_database_host_is_refused_naming_it() {
    use_private_bin();
    let Some(h) = Hosts::new(&["a"], |_| {
        "[projects.p]\ncommand = [\"true\"]\n".to_string()
    }) else {
        return;
    };
    let a = h.fleet("a");
    let id = a.enqueue("p");
    let mut daemon = h.start("a");
    a.wait_terminal(id);
    daemon.kill();
    let missing = a.file("no-such-fleet.toml");
    for args in [&["runs"][..], &["check"], &["status"], &["hosts"]] {
        let out = a
            .command_with_config(&missing)
            .arg("--state-dir")
            .arg(a.state_dir())
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("shared database postgresql ") && stderr.contains("no-such-fleet.toml"),
            "{args:?}: {stderr}"
        );
    }
}
