//! Processes as /proc shows them, signals, and the daemon lock. Reading /proc is harmless; a
//! signal goes only to a pid the caller identified as its test's own (its marker, its child,
//! or its fleet's fork server).

use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;
use rustix::io::Errno;
use rustix::process::Pid;
pub use rustix::process::Signal;

use super::{DEADLINE, MARKER_VAR};

/// Every pid in /proc right now (empty if /proc cannot be read).
pub fn all_pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect()
}

/// Whether `pid` is a daemon's fork server (crates/supervisor/src/shim/forkserver.rs names itself
/// `fleet-forksrv`): it lives exactly as long as its daemon and is no run's process.
pub fn is_fork_server(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "fleet-forksrv")
}

/// The run a shim process serves: `fleet shim ... --run-id N ...` when exec'd, or named
/// `shim-N` when forked by the fork server. `None` for any other process.
pub fn shim_run_id(pid: i32) -> Option<i64> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    if let Some(id) = comm.trim().strip_prefix("shim-") {
        return id.parse().ok();
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if args.get(1).map(String::as_str) != Some("shim") {
        return None;
    }
    let i = args.iter().position(|a| a == "--run-id")?;
    args.get(i + 1)?.parse().ok()
}

/// Pids of live (non-zombie) processes whose environment holds `MARKER_VAR=marker`.
pub fn marked_pids(marker: &str) -> Vec<i32> {
    let needle = format!("{MARKER_VAR}={marker}");
    let needle = needle.as_bytes();
    let mut out = Vec::new();
    for pid in all_pids() {
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|var| var == needle) {
            out.push(pid);
        }
    }
    out
}

/// The process state letter and process group from /proc/<pid>/stat (`None` if there is no
/// such process).
fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid pgrp ...": comm may contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// A pid as rustix takes it; panics on 0 or a negative number (which `kill` would read as a
/// process group, or every process).
fn pid_of(pid: i32) -> Pid {
    Pid::from_raw(pid).unwrap_or_else(|| panic!("bad pid {pid}"))
}

/// Sends `sig` to process `pid` (never to a group: `pid` must be positive). `Err` when it
/// cannot be delivered, e.g. ESRCH once the process is gone.
pub fn send_signal(pid: i32, sig: Signal) -> std::io::Result<()> {
    rustix::process::kill_process(pid_of(pid), sig).map_err(std::io::Error::from)
}

/// Sends `sig` to every process of process group `pgid`, as an operator's `kill -- -PGID`.
pub fn signal_group(pgid: i32, sig: Signal) -> std::io::Result<()> {
    rustix::process::kill_process_group(pid_of(pgid), sig).map_err(std::io::Error::from)
}

/// Whether process `pid` is gone: `kill(pid, 0)` says ESRCH, or it is only a zombie left for
/// init to reap (in a container, pid 1 may never reap it).
pub fn process_gone(pid: i32) -> bool {
    if rustix::process::test_kill_process(pid_of(pid)) == Err(Errno::SRCH) {
        return true;
    }
    matches!(proc_state(pid), None | Some(('Z' | 'X' | 'x', _)))
}

/// Whether `pid` has exited but was not reaped yet by its parent (state `Z` in /proc).
pub fn is_zombie(pid: i32) -> bool {
    matches!(proc_state(pid), Some(('Z', _)))
}

/// Live (non-zombie) processes in process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for pid in all_pids() {
        if let Some((state, pgrp)) = proc_state(pid) {
            if pgrp == pgid && !matches!(state, 'Z' | 'X' | 'x') {
                out.push(pid);
            }
        }
    }
    out
}

/// Live processes with `path` (the state directory's daemon.lock) open: (pid, command line).
pub fn lock_holders(path: &Path) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for pid in all_pids() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).ok().as_deref() == Some(path))
        {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if !process_gone(pid) {
                out.push((pid, cmd.trim().to_string()));
            }
        }
    }
    out
}

/// Whether nobody holds the flock on `path`: takes it (`LOCK_EX|LOCK_NB`) and lets it go at
/// once (closing the file releases it). Only for when no daemon is starting: a probe that holds
/// the lock for an instant makes a daemon starting at that instant refuse. Panics if the file
/// exists but cannot be opened.
pub fn lock_is_free(path: &Path) -> bool {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
        Err(e) => panic!("{}: {e}", path.display()),
    };
    rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// After a daemon was SIGKILLed and reaped: waits until its state directory's daemon lock is
/// free, so that the next daemon is not refused. Panics after [`DEADLINE`], naming the holders.
///
/// Why (a product bug, see `restart_right_after_a_crash_is_never_refused` in
/// tests/e2e/failpoints): the daemon spawns each shim with fork + exec; between the two, the child
/// still holds the daemon lock's descriptor (close-on-exec only closes it *at* exec, and exec of
/// the big binary can take a while on a loaded machine). When the daemon is killed in that
/// window, the orphaned child keeps the lock until its exec gets that far, and a daemon started
/// at once is refused ("another fleet daemon (pid <dead daemon>) holds the state directory").
/// Scenario tests that are about other things wait for it here; the dedicated test does not.
pub fn wait_daemon_lock_released(state_dir: &Path) {
    let lock = state_dir.join("daemon.lock");
    let deadline = Instant::now() + DEADLINE;
    while !lock_is_free(&lock) {
        if Instant::now() > deadline {
            panic!(
                "{} still held after {:?}, by {:?}",
                lock.display(),
                DEADLINE,
                lock_holders(&lock)
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
