//! `fleet logs` of a run still running on another host, whose daemon listens on port 0: the
//! address it publishes is the one bound (the port chosen), so the log is read through it; and
//! `--follow` of such a run, to its end.

use super::harness::*;
use crate::common::*;

/// Gives host `b` a listener on port 0.
fn listen_on_b(h: &Hosts) {
    let b = h.fleet("b");
    let text = std::fs::read_to_string(&b.config).unwrap();
    b.write_config(&format!("http_listen = \"127.0.0.1:0\"\n{text}"));
}

/// Waits until run `id` runs on host `b`.
fn wait_running_on_b(h: &Hosts, id: i64) {
    h.wait_until(DEADLINE, "the run running on b", || {
        let r = h.fleet("a").run(id);
        status_of(&r) == "running" && r["host"].as_str() == Some("b")
    });
}

/// Gives host `b` a listener on port 0, starts its daemon (the only one: `a` only reads the
/// shared database) and enqueues a run of `p` from `a`, which `b` is running on return.
fn a_run_on_b(h: &Hosts) -> (Daemon<'_>, i64) {
    listen_on_b(h);
    let daemon = h.start("b");
    let id = h.fleet("a").enqueue("p");
    wait_running_on_b(h, id);
    (daemon, id)
}

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
    let (_db, id) = a_run_on_b(&h);
    h.wait_until(DEADLINE, "a reading the running run's log from b", || {
        let out = h.fleet("a").cmd(&["logs", &id.to_string()]);
        out.code() == Some(0) && out.stdout.contains(&format!("hello from {id}"))
    });
    std::fs::write(h.shared().join("go"), "").unwrap();
    h.fleet("a").wait_terminal(id);
}

/// `fleet logs --follow` of a run on another host prints its output as it comes, through that
/// host's listener, and ends by itself once the run has ended, with everything it wrote: here
/// 300 KiB at the end, more than one answer of the listener carries (256 KiB). It is started
/// while the run is still queued, before any host claimed it: the host that claims it is
/// found then. Once the run has ended, its log is read from the database even through a
/// config that no longer reads, with the state directory named (`--state-dir`).
#[test]
fn a_remote_runs_log_is_followed_to_its_end() {
    use_private_bin();
    const TAIL: usize = 300 * 1024;
    let Some(h) = Hosts::new(&["a", "b"], |dir| {
        let gate = shell_quote(&dir.join("go"));
        format!(
            "max_concurrency = 2\n[projects.p]\ncommand = {}\n",
            sh(&format!(
                "echo first line; while [ ! -e {gate} ]; do sleep 0.05; done; \
                 echo second line; head -c {TAIL} /dev/zero | tr '\\0' x; echo; echo last line"
            ))
        )
    }) else {
        return;
    };
    listen_on_b(&h);
    let id = h.fleet("a").enqueue("p");
    let mut follow = h
        .fleet("a")
        .command()
        .args(["logs", "--follow", &id.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its output, as it comes.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let seen = seen.clone();
        let mut stdout = follow.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            loop {
                match std::io::Read::read(&mut stdout, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.lock().unwrap().extend_from_slice(&buf[..n]),
                }
            }
        })
    };
    let printed = || String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    let _db = h.start("b");
    wait_running_on_b(&h, id);
    h.wait_until(DEADLINE, "the follower to print the first line", || {
        printed().contains("first line")
    });
    assert!(
        follow.try_wait().unwrap().is_none(),
        "the follower ended while the run is still running: {}",
        printed()
    );
    std::fs::write(h.shared().join("go"), "").unwrap();
    h.wait_until(DEADLINE, "the follower to end by itself", || {
        follow.try_wait().unwrap().is_some()
    });
    let status = follow.wait().unwrap();
    reader.join().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(follow.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    let expected = format!("first line\nsecond line\n{}\nlast line\n", "x".repeat(TAIL));
    let out = printed();
    assert!(
        out == expected,
        "the follower printed {} bytes, not the run's {} (start: {:?}, end: {:?})",
        out.len(),
        expected.len(),
        &out[..out.len().min(40)],
        &out[out.len().saturating_sub(40)..]
    );
    assert_eq!(status_of(&h.fleet("a").wait_terminal(id)), "succeeded");

    // a's file broken (a key it does not know), its state directory named: the log is still
    // b's — all of it, from b's listener, although the database kept only its last 64 KiB —
    // not an empty one from a's folder.
    let a = h.fleet("a");
    let broken = a.file("broken.toml");
    let text = std::fs::read_to_string(&a.config).unwrap();
    std::fs::write(&broken, format!("{text}bogus_key = 1\n")).unwrap();
    let out = a
        .command_with_config(&broken)
        .arg("--state-dir")
        .arg(a.state_dir())
        .args(["logs", &id.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout == expected,
        "{:?}: {} bytes: {}",
        out.status,
        stdout.len(),
        String::from_utf8_lossy(&out.stderr)
    );
}
