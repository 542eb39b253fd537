//! A daemon on its way out is not a live daemon. `kill -9` returns before the killed daemon is
//! gone: until its exit comes as far as closing its files (a moment, longer on a loaded machine
//! or for a large process), it still holds the state directory's lock. A daemon started then
//! must wait for it to go — a bounded time — and take over; a live holder is still refused at
//! once.
//!
//! The moment is held open here, so that the test does not depend on timing: the test traces
//! the first daemon (it is its parent) and asks to be stopped at its exit (`PTRACE_O_TRACEEXIT`),
//! then kills it. The kernel stops it inside its exit, killed and certain to end, its lock still
//! held — exactly the state a slow exit leaves — until the test lets it go on. Where this
//! process may not trace its child, the test says so loudly and skips.

use crate::common::*;

/// A daemon killed by SIGKILL and held inside its exit by this process, as its tracer. Dropping
/// it lets the exit go on.
struct HeldInExit {
    pid: i32,
    released: bool,
}

impl HeldInExit {
    /// Traces `pid` (a child of this process), kills it and waits until the kernel has stopped
    /// it inside its exit. `None` (after a loud message) when this process may not trace it.
    fn kill(pid: i32) -> Option<HeldInExit> {
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
            eprintln!(
                "\n\n!!! SKIPPED: this process may not trace its child here ({}): the test of a daemon on its way out did not run !!!\n\n",
                std::io::Error::last_os_error()
            );
            return None;
        }
        let held = HeldInExit {
            pid,
            released: false,
        };
        send_signal(pid, Signal::KILL).expect("SIGKILL to the daemon");
        loop {
            let mut status = 0;
            // SAFETY: waits for the traced child (no reaping: it is stopped, not ended), writing
            // its status into a local.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
            if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                continue;
            }
            assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
            if status >> 8 == libc::SIGTRAP | (libc::PTRACE_EVENT_EXIT << 8) {
                return Some(held);
            }
            assert!(
                libc::WIFSTOPPED(status),
                "the daemon ended without stopping at its exit (status {status:#x})"
            );
            // Another stop (a signal on its way): resume it with that signal.
            // SAFETY: resumes the stopped child; no memory of this process is touched.
            unsafe {
                libc::ptrace(
                    libc::PTRACE_CONT,
                    pid,
                    std::ptr::null_mut::<libc::c_void>(),
                    libc::WSTOPSIG(status) as usize as *mut libc::c_void,
                )
            };
        }
    }

    /// Lets the daemon's exit go on: it closes its files (the lock goes) and ends.
    fn release(&mut self) {
        if !self.released {
            self.released = true;
            // SAFETY: detaches from the stopped child; no memory of this process is touched.
            unsafe {
                libc::ptrace(
                    libc::PTRACE_DETACH,
                    self.pid,
                    std::ptr::null_mut::<libc::c_void>(),
                    std::ptr::null_mut::<libc::c_void>(),
                )
            };
        }
    }
}

impl Drop for HeldInExit {
    fn drop(&mut self) {
        self.release();
    }
}

/// What the /proc entry of `pid` says: its state letter and the flags field of its `stat`.
fn proc_state(pid: i32) -> (char, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    (
        fields[0].chars().next().unwrap(),
        fields[6].parse().unwrap(),
    )
}

/// `kill -9` the daemon, then `fleet daemon` while the first is still inside its exit: the new
/// daemon waits for it and takes over.
#[test]
fn a_new_daemon_waits_for_one_that_is_exiting_and_takes_over() {
    let f = Fleet::new("tick = \"100ms\"\n[projects.p]\ncommand = [\"true\"]\n");
    let first = f.start_daemon();
    let pid = first.pid();
    let Some(mut exit) = HeldInExit::kill(pid) else {
        return;
    };
    // Killed and inside its exit (PF_SIGNALED), not a zombie, and the lock is still held.
    let (state, flags) = proc_state(pid);
    assert!(
        state != 'Z' && flags & 0x400 != 0,
        "the first daemon is killed and not yet a zombie: state {state}, flags {flags:#x}"
    );
    assert!(
        !lock_is_free(&f.state_dir().join("daemon.lock")),
        "the exiting daemon still holds the lock"
    );

    let mut second = f.spawn_daemon(&[]);
    f.wait_until(
        DEADLINE,
        "the new daemon to wait for the exiting one",
        || {
            if let Some(st) = second.try_exit() {
                panic!(
                    "the new daemon did not wait for daemon {pid}, which is exiting ({st}):\n{}",
                    second.stderr()
                );
            }
            second
                .stderr()
                .contains("is exiting; waiting for it to finish")
        },
    );
    exit.release();
    f.wait_until(DEADLINE, "the new daemon to take over", || {
        if let Some(st) = second.try_exit() {
            panic!("the new daemon exited ({st}):\n{}", second.stderr());
        }
        let s = f.status();
        s["daemon"]["running"] == true && s["daemon"]["pid"].as_i64() == Some(second.pid() as i64)
    });
    let id = f.enqueue("p");
    assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    drop(first);
}

/// A live daemon is refused at once, naming its pid: nothing about it is on its way out.
#[test]
fn a_live_daemon_is_refused_at_once() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    let first = f.start_daemon();
    let mut second = f.spawn_daemon(&[]);
    f.wait_until(DEADLINE, "the second daemon to be refused", || {
        second.try_exit().is_some()
    });
    let st = second.try_exit().unwrap();
    let err = second.stderr();
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "another fleet daemon (pid {}) holds the state directory",
            first.pid()
        )),
        "{err}"
    );
    assert!(!err.contains("waiting for it"), "{err}");
}
