use super::*;

/// A shim's words where the daemon's command line left room for them; its short name where
/// it did not (`fleet daemon`: 13 bytes), never the words cut mid-way.
#[test]
fn a_command_line_that_does_not_fit_becomes_the_short_name() {
    let words = ["fleet", "shim", "--run-id", "7"];
    let mut whole = b"fleet\0shim\0--run-id\0".to_vec();
    whole.push(b'7');
    whole.resize(32, 0);
    assert_eq!(command_line_bytes("shim-7", &words, 32), whole);
    assert_eq!(
        command_line_bytes("shim-7", &words, "fleet\0daemon\0".len()),
        b"shim-7\0\0\0\0\0\0\0"
    );
    assert_eq!(command_line_bytes("shim-12345", &words, 4), b"shi\0");
}

#[test]
fn start_time_reads_field_22() {
    let me = std::process::id() as i32;
    let t = start_time(me).expect("own start time");
    assert_eq!(start_time(me), Some(t), "stable");
    assert_eq!(start_time(0), None);
    assert_eq!(start_time(-1), None);
    // Field 22 is after the comm field, which may hold spaces and parentheses.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    assert_eq!(fields[19].parse::<u64>().unwrap(), t);
}

/// A child that exited but is not reaped yet keeps its pid and start time: it is not running
/// all the same, and neither is a pid with another start time.
#[test]
fn a_zombie_is_not_running() {
    let me = std::process::id() as i32;
    let mine = start_time(me).unwrap();
    assert!(is_running(me, mine));
    assert!(
        !is_running(me, mine + 1),
        "another start time is another process"
    );
    assert!(!is_running(0, 0));

    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    let started = start_time(pid).expect("the child's start time");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !has_exited(pid).unwrap() {
        assert!(std::time::Instant::now() < deadline, "`true` never ended");
        std::thread::yield_now();
    }
    // Exited, not reaped: a zombie, with the same pid and start time.
    assert_eq!(start_time(pid), Some(started));
    assert!(!is_running(pid, started), "a zombie counts as dead");
    child.wait().unwrap();
    assert!(!is_running(pid, started));
}

/// A process killed but still inside its exit is on its way out, not running: held there
/// (as a slow exit would hold it) by a tracer that stops it at its exit. It then ends, and
/// a zombie is gone. Killed by SIGKILL, the kill also shows as pending; by SIGTERM, only the
/// kernel's exit flags say so.
#[test]
fn a_process_killed_but_still_exiting_is_exiting() {
    let me = std::process::id() as i32;
    assert_eq!(life(me, start_time(me).unwrap()), Life::Running);
    assert_eq!(life(me, start_time(me).unwrap() + 1), Life::Gone);
    assert_eq!(life(0, 0), Life::Gone);
    for signal in [Signal::SIGKILL, Signal::SIGTERM] {
        held_in_its_exit(signal);
    }
}

/// Starts a child, kills it with `signal` while traced so that it stops inside its exit, and
/// checks what `life` says of it there and after.
fn held_in_its_exit(signal: Signal) {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id() as i32;
    let started = start_time(pid).unwrap();
    assert_eq!(life(pid, started), Life::Running);
    // SAFETY: PTRACE_SEIZE takes a pid, a null address and the options as its data; it
    // touches no memory of this process.
    let seized = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            libc::PTRACE_O_TRACEEXIT as usize as *mut libc::c_void,
        )
    };
    if seized != 0 {
        let e = io::Error::last_os_error();
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "this process may not trace its own child ({e}): the test cannot hold one in its exit"
        );
    }
    signal_process(pid, signal).unwrap();
    let mut status = 0;
    loop {
        // SAFETY: waits for the traced child, writing its status into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        assert_eq!(r, pid, "{}", io::Error::last_os_error());
        if status >> 8 == libc::SIGTRAP | (libc::PTRACE_EVENT_EXIT << 8) {
            break;
        }
        assert!(
            libc::WIFSTOPPED(status),
            "{signal:?}: ended without stopping at its exit: {status:#x}"
        );
        // SAFETY: resumes the stopped child, handing it the signal it stopped for.
        unsafe {
            libc::ptrace(
                libc::PTRACE_CONT,
                pid,
                std::ptr::null_mut::<libc::c_void>(),
                libc::WSTOPSIG(status) as usize as *mut libc::c_void,
            )
        };
    }
    assert_eq!(
        life(pid, started),
        Life::Exiting,
        "{signal:?}: stopped inside its exit"
    );
    // SAFETY: lets the child go on with its exit; no memory of this process is touched.
    unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !has_exited(pid).unwrap() {
        assert!(std::time::Instant::now() < deadline, "never ended");
        std::thread::yield_now();
    }
    assert_eq!(life(pid, started), Life::Gone, "a zombie");
    child.wait().unwrap();
    assert_eq!(life(pid, started), Life::Gone);
}

#[test]
fn a_pending_sigkill_is_read_from_either_mask() {
    let with = |sig: &str, shd: &str| format!("Name:\tx\nSigPnd:\t{sig}\nShdPnd:\t{shd}\n");
    assert!(!kill_pending(&with("0000000000000000", "0000000000000000")));
    assert!(kill_pending(&with("0000000000000100", "0000000000000000")));
    assert!(kill_pending(&with("0000000000000000", "0000000000000100")));
    // SIGTERM (bit 14) and SIGHUP (bit 0) pending are not a kill.
    assert!(!kill_pending(&with("0000000000004001", "0000000000000000")));
    assert!(!kill_pending("SigPnd:\tnot hex\n"));
}

/// A group is found alive by its number and its session, never by its number alone, and a
/// zombie does not count.
#[test]
fn a_group_is_alive_while_a_member_runs_in_its_session() {
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    spawn_in_new_session(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    // It leads its own session and group: both ids are its pid.
    let pid = child.id() as i32;
    let leader = start_time(pid).expect("the leader's start time");
    assert!(group_alive(pid, Some((pid, leader))).unwrap());
    assert!(group_alive(pid, None).unwrap());
    assert!(
        !group_alive(pid, Some((pid + 1, 0))).unwrap(),
        "another session"
    );
    assert!(
        !group_alive(pid + 1, Some((pid, leader))).unwrap(),
        "another group"
    );
    assert!(
        !group_alive(pid, Some((pid, leader + 1))).unwrap(),
        "the session's number reused: its leader has another start time"
    );
    child.kill().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !has_exited(pid).unwrap() {
        assert!(std::time::Instant::now() < deadline, "`sleep` never ended");
        std::thread::yield_now();
    }
    // A zombie now (not reaped): no member that runs.
    assert!(
        !group_alive(pid, Some((pid, leader))).unwrap(),
        "a zombie is not alive"
    );
    assert!(!group_alive(pid, None).unwrap(), "a zombie is not alive");
    child.wait().unwrap();
    assert!(!group_alive(pid, Some((pid, leader))).unwrap());
}

/// A process whose main thread ended while another thread runs shows as a zombie in its
/// `stat`: it still counts.
#[test]
fn a_process_whose_main_thread_ended_is_alive() {
    let script = "import ctypes, threading, time\n\
                  threading.Thread(target=time.sleep, args=(30,)).start()\n\
                  ctypes.CDLL(None).pthread_exit(None)\n";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]);
    spawn_in_new_session(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as i32;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while stat(pid).map(|(state, _)| state) != Some('Z') {
        assert!(
            std::time::Instant::now() < deadline,
            "the main thread never ended"
        );
        std::thread::yield_now();
    }
    assert!(!has_exited(pid).unwrap(), "a thread still runs");
    let leader = start_time(pid).unwrap();
    assert!(group_alive(pid, Some((pid, leader))).unwrap());
    assert!(group_alive(pid, None).unwrap());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!group_alive(pid, None).unwrap());
}

#[test]
fn signalling_refuses_pids_that_are_not_positive() {
    for pid in [0, -1] {
        let e = signal_process(pid, Signal::SIGTERM).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = signal_group(pid, Signal::SIGTERM).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}

#[test]
fn a_child_is_seen_exited_before_it_is_reaped() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !has_exited(pid).unwrap() {
        assert!(std::time::Instant::now() < deadline, "`true` never ended");
        std::thread::yield_now();
    }
    // Not reaped: the status is still there to collect.
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_child_spawned_in_a_new_session_leads_it() {
    let mut cmd = Command::new("cat");
    cmd.arg("/proc/self/stat");
    spawn_in_new_session(&mut cmd);
    let out = cmd.output().unwrap();
    let stat = String::from_utf8(out.stdout).unwrap();
    let pid: i32 = stat.split_whitespace().next().unwrap().parse().unwrap();
    // Field 6 (session), counted after the parenthesised command name.
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    let session: i32 = after.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert_eq!(session, pid);
    // The daemon's commands are tokio's: the same hook applies to them.
    let mut tokio_cmd = tokio::process::Command::new("true");
    spawn_in_new_session(tokio_cmd.as_std_mut());
}
