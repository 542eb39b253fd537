//! `max_log_size`: the log keeps the newest output under its bound, with one marker line.

use std::process::Stdio;

use crate::common::*;

/// The longest marker line (`--- fleet: N bytes dropped here … ---`), for the bound check.
const MARKER_MAX: u64 = 100;

/// The numbers 1..=`n`, one per line, as `seq` prints them.
fn seq_bytes(n: u64) -> u64 {
    (1..=n).map(|i| i.to_string().len() as u64 + 1).sum()
}

/// Ten times the bound: `succeeded`, the file under bound + marker, `fleet logs` starts with
/// the marker (which counts exactly what is gone) and ends with the command's last line.
#[test]
fn ten_times_the_bound_succeeds_and_keeps_the_tail() {
    let f = Fleet::new(&format!(
        "max_log_size = \"64KiB\"\n[projects.chatty]\ncommand = {}\n",
        sh("seq 1 120000")
    ));
    let _d = f.start_daemon();
    let id = f.enqueue("chatty");
    let run = f.wait_terminal(id);
    assert_eq!(status_of(&run), "succeeded", "{}", f.diagnostics());
    assert_eq!(run["exit_code"], 0);

    let max = 64 * 1024;
    let whole = seq_bytes(120_000);
    assert!(whole >= 10 * max, "the command must write 10x the bound");
    let log_path = log_path(&f, id);
    let on_disk = std::fs::metadata(&log_path).unwrap().len();
    assert!(
        on_disk <= max + MARKER_MAX,
        "the log is {on_disk} bytes, past max_log_size {max} + the marker"
    );

    let shown = f.logs(id);
    let first = shown.lines().next().unwrap_or_default();
    let dropped: u64 = first
        .strip_prefix("--- fleet: ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("fleet logs should start with the marker, got {first:?}"));
    let kept = shown.len() as u64 - first.len() as u64 - 1;
    assert_eq!(dropped + kept, whole, "the marker counts what is gone");
    assert!(shown.ends_with("119999\n120000\n"));
    // A compacted log starts at a line boundary: the first kept line is a whole number.
    let second = shown.lines().nth(1).unwrap();
    let n: u64 = second.parse().unwrap();
    assert_eq!(seq_bytes(n - 1), dropped, "cut at a line boundary");
}

/// `fleet logs --follow` across compactions: every line it prints is printed once, in order;
/// where the log was compacted before the follower read it, a marker says so.
#[test]
fn follow_across_compactions_never_repeats_a_line() {
    // Writes in bursts, so that the follower reads between compactions as well as behind them.
    let f = Fleet::new(&format!(
        "max_log_size = \"4KiB\"\n[projects.chatty]\ncommand = {}\n",
        sh(
            "i=0; while [ $i -lt 300 ]; do seq $((i*100+1)) $((i*100+100)); i=$((i+1)); \
            [ $((i % 20)) -eq 0 ] && sleep 0.1; done"
        )
    ));
    let _d = f.start_daemon();
    let id = f.enqueue("chatty");
    let mut follow = f.command();
    follow
        .args(["logs", &id.to_string(), "--follow"])
        .stdout(Stdio::piped());
    let out = run_with_deadline(follow, CMD_DEADLINE);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert_eq!(status_of(&f.run(id)), "succeeded");
    let mut last = 0u64;
    let mut markers = 0;
    for line in out.stdout.lines() {
        if line.starts_with("--- fleet: ") {
            markers += 1;
            continue;
        }
        let n: u64 = line
            .parse()
            .unwrap_or_else(|_| panic!("not a line of the command's output: {line:?}"));
        assert!(
            n > last,
            "line {n} printed after {last}: repeated or out of order"
        );
        last = n;
    }
    assert_eq!(last, 30_000, "the follower printed the log to its end");
    assert!(markers >= 1, "the follower must say what it missed");
}
