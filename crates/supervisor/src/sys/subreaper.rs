//! A process as the child subreaper of its descendants, and what it then does with the
//! processes handed to it.
//!
//! A process that leaves its parent's process group (`setsid`, `setpgid`, a double fork) is out
//! of reach of a signal sent to that group, and when its parent dies it is handed to the
//! machine's init. Once the caller is marked as the subreaper ([`become_subreaper`]), such an
//! orphan is handed to the caller instead, which can then ask it to end ([`Leftovers`]), end
//! it ([`Leftovers::end`]) and reap the ones that end on their own ([`reap_adopted`]).
//!
//! Only a child of the caller is ever signalled here: while it is not reaped, its pid cannot
//! name another process.

use std::collections::BTreeSet;
use std::io;

use rustix::process::{Pid, WaitOptions};

use super::process;

/// Marks the calling process as the child subreaper of its descendants
/// (`PR_SET_CHILD_SUBREAPER`): an orphaned descendant is handed to it, not to init.
///
/// Errors: the kernel refused (it predates Linux 3.4).
pub fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

/// Reaps the children of the caller that have ended, except `keep`, which is left waitable:
/// the orphans a subreaper adopted and that ended while `keep` still runs. Never blocks. Stops
/// at the first waitable child that is `keep` (what is behind it is reaped by
/// [`Leftovers::end`]).
pub fn reap_adopted(keep: i32) {
    while let Children::Ended(pid) = peek_children() {
        if pid == keep {
            return;
        }
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
        }
    }
}

/// Whether the caller has any child left, running or ended and not reaped (one non-blocking
/// look; a look that fails counts as "some").
pub fn has_children() -> bool {
    !matches!(peek_children(), Children::None)
}

/// What the caller's children are, as far as one non-blocking look tells.
enum Children {
    /// It has none at all (ECHILD).
    None,
    /// It has some, none of them ended (or the look failed: "some", so that callers look).
    Running,
    /// This one has ended and is not reaped yet (there may be others).
    Ended(i32),
}

/// `waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)`: looks at the caller's children without
/// blocking and without reaping any. Retries on EINTR.
fn peek_children() -> Children {
    loop {
        // SAFETY: an all-zero `siginfo_t` is a valid value of this plain C struct; waitid
        // writes into it and reads nothing from it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a live local the call writes into; P_ALL takes no id. WNOWAIT
        // leaves the child waitable, WNOHANG returns at once.
        let r = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r != 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Children::None,
                _ => return Children::Running,
            }
        }
        // SAFETY: waitid succeeded, so `info` holds a SIGCHLD siginfo (or zeros when no
        // child was waitable), whose pid field this reads.
        return match unsafe { info.si_pid() } {
            pid if pid > 0 => Children::Ended(pid),
            _ => Children::Running,
        };
    }
}

/// The SIGTERM half of ending what a command left running: every live child of the caller
/// outside the command's process group gets SIGTERM once ([`Leftovers::term`]), so that a helper
/// the command detached (a background `git gc`, an agent) may clean up as the command's own
/// group may, before [`Leftovers::end`] kills what is still there.
///
/// Only a child of the caller is ever signalled, and no child is reaped meanwhile: a pid it
/// signalled names the same process until [`Leftovers::end`] reaps it.
#[derive(Debug, Default)]
pub struct Leftovers {
    signalled: BTreeSet<i32>,
    unkillable: BTreeSet<i32>,
    escaped: usize,
}

impl Leftovers {
    /// One pass: lists the caller's children, sends SIGTERM to each live one outside group
    /// `pgid` not signalled yet (the group's own members get the group's signal from the
    /// caller), skipping `leader` (the command, a zombie not yet reaped). Returns true while a
    /// live child other than `leader` and those that may not be signalled (EPERM: another
    /// user's) is left: what the caller waits for, up to its grace.
    ///
    /// Call it again after each SIGCHLD: a child that ends hands its own children over, and
    /// those outside the group get their SIGTERM at the next pass.
    pub fn term(&mut self, leader: i32, pgid: i32) -> bool {
        let me = rustix::process::getpid();
        let mut left = false;
        for child in children_of(me) {
            if child == leader || self.unkillable.contains(&child) {
                continue;
            }
            let Some(ids) = process::stat_ids(child) else {
                continue;
            };
            if process::ended(ids.state) {
                continue;
            }
            if ids.group != pgid && !self.signalled.contains(&child) {
                let Some(pid) = Pid::from_raw(child) else {
                    continue;
                };
                match rustix::process::kill_process(pid, rustix::process::Signal::TERM) {
                    Ok(()) => {
                        self.signalled.insert(child);
                        self.escaped += 1;
                    }
                    Err(rustix::io::Errno::PERM) => {
                        self.unkillable.insert(child);
                        continue;
                    }
                    // Ended meanwhile.
                    Err(_) => continue,
                }
            }
            left = true;
        }
        left
    }
}

/// What [`Leftovers::end`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ended {
    /// How many processes outside the process group it was given were found alive, by the
    /// SIGTERM passes ([`Leftovers::term`]) or by this one: those that had left that group.
    pub escaped: usize,
    /// How many of those were still alive here, and killed.
    pub killed: usize,
    /// The children it found alive but could not signal (EPERM: they run as another user),
    /// left running and not waited for.
    pub unkillable: Vec<i32>,
}

impl Leftovers {
    /// Kills (SIGKILL) every child the caller still has — the orphans it adopted, and the
    /// processes of group `pgid` handed to it as their parents died — and reaps them, over and
    /// over, since each one killed may hand its own children over, until none is left.
    ///
    /// Each pass lists the children once, signals only those it has not signalled yet (a child
    /// not reaped keeps its pid, so a pid signalled once is the same process), then reaps every
    /// child that has ended before it lists again: thousands of escapees cost a few passes, not
    /// one per process. Blocks while a child it killed has not ended yet; a child that may not
    /// be signalled is not waited for: once only such children are left, it returns.
    pub fn end(mut self, pgid: i32) -> Ended {
        // The usual case, a command that left nothing behind: one `waitid` says so, where
        // listing the children reads `/proc`.
        if let Children::None = peek_children() {
            return self.ended(0);
        }
        let me = rustix::process::getpid();
        // Killed here; `self.signalled` holds those the SIGTERM passes signalled (and counted).
        let mut signalled = BTreeSet::new();
        let mut killed = 0;
        loop {
            let children = children_of(me);
            for &child in &children {
                if signalled.contains(&child) || self.unkillable.contains(&child) {
                    continue;
                }
                let Some(pid) = Pid::from_raw(child) else {
                    continue;
                };
                let ids = process::stat_ids(child);
                let outside = ids.as_ref().is_some_and(|i| i.group != pgid);
                // Unreadable: ended meanwhile.
                let alive = ids.is_some_and(|i| !process::ended(i.state));
                match rustix::process::kill_process(pid, rustix::process::Signal::KILL) {
                    Ok(()) => {
                        signalled.insert(child);
                        if outside && alive {
                            killed += 1;
                            if self.signalled.insert(child) {
                                self.escaped += 1;
                            }
                        }
                    }
                    Err(rustix::io::Errno::PERM) if alive => {
                        self.unkillable.insert(child);
                    }
                    // Ended meanwhile: reaped below like the others.
                    Err(_) => {
                        signalled.insert(child);
                    }
                }
            }
            if children.iter().all(|c| self.unkillable.contains(c)) {
                return self.ended(killed);
            }
            // Reap whatever has ended; wait for one only when nothing had.
            let mut reaped = false;
            loop {
                match rustix::process::wait(WaitOptions::NOHANG) {
                    Ok(Some((pid, _))) => {
                        self.forget(&mut signalled, pid);
                        reaped = true;
                    }
                    Ok(None) => break,
                    Err(rustix::io::Errno::INTR) => {}
                    // ECHILD: nothing left at all.
                    Err(_) => return self.ended(killed),
                }
            }
            if !reaped {
                match rustix::process::wait(WaitOptions::empty()) {
                    Ok(Some((pid, _))) => self.forget(&mut signalled, pid),
                    Ok(None) | Err(rustix::io::Errno::INTR) => {}
                    Err(_) => return self.ended(killed),
                }
            }
        }
    }

    fn ended(self, killed: usize) -> Ended {
        Ended {
            escaped: self.escaped,
            killed,
            unkillable: self.unkillable.into_iter().collect(),
        }
    }

    /// Drops a reaped child from every set: its pid may now name another process.
    fn forget(&mut self, killed: &mut BTreeSet<i32>, pid: Pid) {
        let pid = pid.as_raw_nonzero().get();
        killed.remove(&pid);
        self.signalled.remove(&pid);
        self.unkillable.remove(&pid);
    }
}

/// The children of process `me` (single-threaded: its main thread's list), live or ended and
/// not reaped: `/proc/<me>/task/<me>/children`, or, on a kernel without that file, every
/// process whose parent is `me` by a scan of `/proc`.
fn children_of(me: Pid) -> Vec<i32> {
    let me = me.as_raw_nonzero().get();
    match super::process::read_proc_file(&format!("/proc/{me}/task/{me}/children")) {
        Ok(list) => list
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
        Err(_) => scan_children(me),
    }
}

/// Every process whose parent (field 4 of `/proc/<pid>/stat`) is `me`.
fn scan_children(me: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| process::stat_ids(pid).is_some_and(|i| i.parent == me))
        .collect()
}
