//! Processes: fork, immediate exit, sessions, the parent-death signal, signalling and waiting,
//! process names, a process's start time and whether it still runs (a zombie does not), and the
//! hooks a child runs between fork and exec.
//!
//! `fork` and `_exit` are raw libc calls (through `nix` for fork); the rest goes through rustix.
//! Pids are plain `i32` here, as the kernel and the run files write them.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use rustix::process::{Pid, WaitIdOptions, WaitOptions};

use super::signals::Signal;

/// Which side of a [`fork`] the caller is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The new process.
    Child,
    /// The calling process; the child's pid.
    Parent(i32),
}

/// Forks the calling process, which must have exactly one thread: in a process with more, only
/// the forking thread survives in the child, with whatever locks the others held (the memory
/// allocator's, the standard streams'), and the child could deadlock or see torn state.
///
/// Checks the thread count first (one read of `/proc/self/task`); with one thread nothing can
/// start another before the fork, so the check cannot go stale.
///
/// Errors: the process has more than one thread (nothing is forked), or fork(2) failed.
pub fn fork() -> io::Result<Forked> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(io::Error::other(format!(
            "the process already has {threads} threads; forking it needs one"
        )));
    }
    // SAFETY: the process has exactly one thread (checked above; only this thread could start
    // another).
    unsafe { fork_single_threaded() }
}

/// [`fork`] without its check of the thread count, for a process that checked once and starts
/// no thread afterwards (the fork server forks a shim per run; a read of `/proc/self/task` per
/// fork would cost more than the fork's own bookkeeping).
///
/// Errors: fork(2) failed.
///
/// # Safety
///
/// The process has exactly one thread.
pub unsafe fn fork_single_threaded() -> io::Result<Forked> {
    // SAFETY: the caller's guarantee: one thread, so the child is a consistent copy of it and
    // may run any code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child.as_raw())),
    }
}

/// Replaces this process's program with `program` (execv(3): the same environment, the
/// descriptors without close-on-exec, ignored signals stay ignored), `argv` its arguments
/// (`argv[0]` included). Returns only if the exec failed, with the reason.
pub fn exec(program: &CStr, argv: &[&CStr]) -> io::Error {
    let mut pointers: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    // SAFETY: `program` and every argument are NUL-terminated strings that outlive the call,
    // and the pointer array ends with a null pointer as execv requires.
    unsafe { libc::execv(program.as_ptr(), pointers.as_ptr()) };
    io::Error::last_os_error()
}

/// How many threads the calling process has.
///
/// Errors: `/proc/self/task` cannot be read.
pub fn thread_count() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// Ends the process at once with `code`: no destructors, no buffered output flushed, no
/// `atexit` handlers. For a forked child that must never return into its parent's code.
/// Async-signal-safe.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit(2) ends the process without touching any of its memory; it is
    // async-signal-safe and always allowed.
    unsafe { libc::_exit(code) }
}

/// The parent's pid (after the parent died, the pid of whoever adopted this process).
/// Async-signal-safe.
pub fn parent_pid() -> i32 {
    Pid::as_raw(rustix::process::getppid())
}

/// Asks the kernel to send SIGKILL to this process when the *thread* that forked it ends (for a
/// single-threaded parent: when the parent dies). Cleared by an exec of a set-user-ID program.
/// Async-signal-safe.
///
/// Errors: the system refused.
pub fn die_with_parent() -> io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    Ok(())
}

/// Makes this process the leader of a new session (and of a new process group), detached from
/// the controlling terminal. Async-signal-safe.
///
/// Errors: the process already leads a process group.
pub fn new_session() -> io::Result<()> {
    rustix::process::setsid()?;
    Ok(())
}

/// Sends `signal` to process `pid` (positive).
///
/// Errors: `pid` is not positive (`InvalidInput`, nothing sent), the process does not exist
/// (ESRCH), or may not be signalled (EPERM).
pub fn signal_process(pid: i32, signal: Signal) -> io::Result<()> {
    rustix::process::kill_process(to_pid(pid)?, to_rustix(signal)?)?;
    Ok(())
}

/// Sends `signal` to every process of the process group `pgid` (positive). Returns `false` when
/// the group is empty (ESRCH: nobody left to signal), which is not an error.
///
/// Errors: `pgid` is not positive (`InvalidInput`, nothing sent), or none of the group may be
/// signalled (EPERM).
pub fn signal_group(pgid: i32, signal: Signal) -> io::Result<bool> {
    match rustix::process::kill_process_group(to_pid(pgid)?, to_rustix(signal)?) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::SRCH) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A session as [`group_alive`] identifies it: its id (the pid of its leader) and the leader's
/// start time (clock ticks since boot; 0 when unknown).
pub type Session = (i32, u64);

/// Whether a process that still runs is in process group `pgid` — within the session of
/// `session`, when given: the session's id (the pid of its leader) and that leader's start time
/// (clock ticks since boot, as [`start_time`] reads it; 0 when unknown). A scan of `/proc`
/// (fields 3, 5 and 6 of each `stat`).
///
/// The pair identifies a group where its number alone does not: once a group is empty its
/// number may be reused by any process that leads a group of its own, but a match inside the
/// same session needs the session's number reused as well — and a process alive under that
/// number with another start time than the leader's says it was: then nothing counts.
///
/// A zombie does not count (it runs nothing, and may wait long for a parent that does not reap
/// it, as under a pid namespace's first process that never does), unless only its main thread
/// ended and others still run (`/proc/PID/task` lists more than it).
///
/// Errors: `/proc` cannot be listed. A process that ends during the scan is skipped.
pub fn group_alive(pgid: i32, session: Option<Session>) -> io::Result<bool> {
    if pgid <= 0 || session.is_some_and(|(sid, _)| sid <= 0) {
        return Ok(false);
    }
    if let Some((sid, leader_start)) = session {
        if leader_start != 0 && start_time(sid).is_some_and(|t| t != leader_start) {
            return Ok(false);
        }
    }
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Some(StatIds {
            state,
            group,
            session: in_session,
            ..
        }) = stat_ids(pid)
        else {
            continue;
        };
        if group != pgid || session.is_some_and(|(sid, _)| sid != in_session) {
            continue;
        }
        let runs = match state {
            'X' | 'x' => false,
            // The main thread's exit leaves the process a zombie while its other threads run.
            'Z' => std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|t| t.count() > 1),
            _ => true,
        };
        if runs {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Fields 3 to 6 of `/proc/<pid>/stat`: what a process is and belongs to.
pub(super) struct StatIds {
    /// Field 3, the state letter (see [`ended`]).
    pub state: char,
    /// Field 4, the parent's pid.
    pub parent: i32,
    /// Field 5, the process group.
    pub group: i32,
    /// Field 6, the session.
    pub session: i32,
}

/// Fields 3 to 6 of `/proc/<pid>/stat`, parsed after the last `)` as [`stat`] does; `None`
/// when there is no such process (or `/proc` cannot be read).
pub(super) fn stat_ids(pid: i32) -> Option<StatIds> {
    let stat = read_proc_file(&format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    Some(StatIds {
        state: fields.next()?.chars().next()?,
        parent: fields.next()?.parse().ok()?,
        group: fields.next()?.parse().ok()?,
        session: fields.next()?.parse().ok()?,
    })
}

/// Whether the child `pid` has exited, without reaping it (WNOWAIT), so that its pid — and so
/// its process group id — stays reserved and may still be signalled safely afterwards.
/// Retries on EINTR.
///
/// Errors: `pid` is not a child of this process (ECHILD) or not positive.
pub fn has_exited(pid: i32) -> io::Result<bool> {
    let pid = to_pid(pid)?;
    loop {
        match rustix::process::waitid(
            rustix::process::WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
        ) {
            Ok(status) => return Ok(status.is_some()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits for the child `pid` to end and reaps it, so that no zombie is left. Blocks; errors
/// (not a child, already reaped) are ignored: either way no zombie of it remains.
pub fn reap(pid: i32) {
    if let Ok(pid) = to_pid(pid) {
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
    }
}

/// Names this process for `ps`, `top` and `/proc`: `comm` as the short name (`ps -o comm`,
/// cut to 15 bytes), `command_line` as its command line (`ps -f`, `/proc/PID/cmdline`, and what
/// `pkill -f` matches). Best effort: a name the system refuses is left as it was.
///
/// The command line is rewritten in place, in the memory that held the original arguments; the
/// rest is cleared. When `command_line` does not fit there (the daemon was started with a
/// shorter command line, such as `fleet daemon`), `comm` is written instead, cut to the size if
/// need be: a command line cut mid-word (`fleet shim -`) would only mislead. That memory is
/// only written while the process has one thread (otherwise the command line is left alone):
/// nothing can read the arguments at the same time, and anything reading them later reads the
/// new words, each still NUL-terminated.
/// Call it in a process that has no further use for its original arguments (a forked copy of
/// the daemon).
pub fn set_process_name(comm: &str, command_line: &[&str]) {
    set_short_name(comm);
    if thread_count().is_ok_and(|n| n == 1) {
        if let Some(own) = own_stat() {
            set_command_line(comm, command_line, &own);
        }
    }
}

/// [`set_process_name`] for a process known to have one thread (a shim the fork server just
/// forked), with its [`own_stat`] already read: no `/proc` read of its own.
///
/// # Safety
///
/// The process has exactly one thread: nothing may read the argument area while it is
/// rewritten.
pub unsafe fn set_process_name_single_threaded(comm: &str, command_line: &[&str], own: &OwnStat) {
    set_short_name(comm);
    set_command_line(comm, command_line, own);
}

/// The short name (`comm`), cut to 15 bytes.
fn set_short_name(comm: &str) {
    let mut short = comm.as_bytes().to_vec();
    short.truncate(15);
    if let Ok(short) = CString::new(short) {
        let _ = rustix::thread::set_name(&short);
    }
}

/// What a process learns about itself from one read of `/proc/self/stat`: its start time, and
/// where its argument area lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnStat {
    /// Field 22: the start time, in clock ticks since boot (as [`start_time`] gives it).
    pub start_time: u64,
    /// Fields 48 and 49 (`arg_start`, `arg_end`): the argument area's bounds, as addresses;
    /// `None` when the kernel hides them or they make no sense.
    arg_area: Option<(usize, usize)>,
}

/// Reads `/proc/self/stat` once (see [`OwnStat`]); `None` if it cannot be read or parsed.
pub fn own_stat() -> Option<OwnStat> {
    let stat = read_proc_file("/proc/self/stat").ok()?;
    // Counted after the parenthesised command name (field 2), which may itself hold spaces
    // and parentheses: field 3 is item 0.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let start_time = fields.get(19)?.parse().ok()?;
    let arg_area = match (
        fields.get(45).and_then(|f| f.parse::<usize>().ok()),
        fields.get(46).and_then(|f| f.parse::<usize>().ok()),
    ) {
        (Some(start), Some(end)) if end > start && end - start <= 1 << 20 => Some((start, end)),
        _ => None,
    };
    Some(OwnStat {
        start_time,
        arg_area,
    })
}

/// Rewrites the argument area (see [`set_process_name`]); single-threaded callers only.
fn set_command_line(comm: &str, words: &[&str], own: &OwnStat) {
    let Some((start, end)) = own.arg_area else {
        return;
    };
    let text = command_line_bytes(comm, words, end - start);
    // SAFETY: [start, end) is this process's own argument area, as the kernel records it:
    // writable memory at the top of the main thread's stack that no Rust value occupies (std
    // only keeps pointers into it). `text` is exactly `end - start` bytes and ends with a NUL,
    // so every argument pointer into the area still finds a terminated string. The process has
    // one thread (checked by the caller), so nothing reads the area during the copy.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), start as *mut u8, text.len()) };
}

/// The bytes [`set_command_line`] writes into an argument area of `room` bytes (at least 1):
/// `words`, each NUL-terminated, or `comm` when they do not fit, cut to the room; NUL-padded to
/// exactly `room`.
fn command_line_bytes(comm: &str, words: &[&str], room: usize) -> Vec<u8> {
    let mut text: Vec<u8> = words.join("\0").into_bytes();
    if text.len() >= room {
        text = comm.as_bytes().to_vec();
    }
    text.truncate(room - 1);
    text.resize(room, 0);
    text
}

/// The most bytes one exec may carry in arguments and environment together (strings with their
/// terminating NULs, plus one pointer each), as `sysconf(_SC_ARG_MAX)` reports it: a quarter of
/// the stack limit, at least 128 KiB. `None` if the system reports no limit or the call fails.
pub fn arg_max() -> Option<usize> {
    nix::unistd::sysconf(nix::unistd::SysconfVar::ARG_MAX)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
}

/// The start time of process `pid`: field 22 of `/proc/<pid>/stat`, in clock ticks since boot.
/// With the pid it identifies a process without trusting a bare pid, which may be reused.
/// `None` if the process does not exist or the file cannot be parsed. Whether that process is
/// still running is [`is_running`]'s to say (a zombie keeps its start time).
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|(_, start)| start)
}

/// Whether `pid` is still the process that started at `start_time` (field 22 of
/// `/proc/<pid>/stat`, as [`start_time`] gave it) and has not ended.
///
/// A process that has ended but whose parent has not reaped it yet (a zombie, state `Z`, or `X`
/// while it is being reaped) still has its pid and its start time, but it runs nothing, holds
/// no lock and no descriptor any more: it counts as dead here. `false` too when there is no such
/// process, or when `/proc` cannot be read.
pub fn is_running(pid: i32, start_time: u64) -> bool {
    matches!(stat(pid), Some((state, start)) if start == start_time && !ended(state))
}

/// What became of the process that started at a given time under a pid ([`life`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Life {
    /// It runs, and nothing has doomed it yet.
    Running,
    /// It is on its way out and nothing can stop that: a SIGKILL is pending for it, or the
    /// kernel is running its exit (killed by a signal, or exiting); it still holds what it held
    /// (its descriptors, and the locks on them) until its exit gets that far.
    Exiting,
    /// It has ended (a zombie included: it holds nothing any more), or another process has its
    /// pid now, or `/proc` cannot say.
    Gone,
}

/// `PF_EXITING` in the flags of `/proc/<pid>/stat` (field 9): the kernel is running the
/// process's exit.
const PF_EXITING: u64 = 0x4;
/// `PF_SIGNALED` in the same flags: the process took a fatal signal, and its exit follows.
const PF_SIGNALED: u64 = 0x400;
/// SIGKILL in a pending-signal mask of `/proc/<pid>/status` (bit 9 - 1).
const SIGKILL_PENDING: u64 = 1 << 8;

/// Whether `pid` is still the process that started at `start_time` and whether it is on its
/// way out. The states it reports only follow each other forwards (a pending SIGKILL, the
/// kernel's exit, the end), so a process found [`Life::Exiting`] is never found running again:
/// a caller may wait for it to end, and should, rather than take it for a live one.
///
/// Reads `/proc/<pid>/stat` (its state letter, flags and start time) and, when those show no
/// exit under way, `/proc/<pid>/status` for a pending SIGKILL (sent, not yet acted on).
pub fn life(pid: i32, start_time: u64) -> Life {
    let Some(stat) = stat_fields(pid) else {
        return Life::Gone;
    };
    if stat.start != start_time || ended(stat.state) {
        return Life::Gone;
    }
    if stat.flags & (PF_EXITING | PF_SIGNALED) != 0 {
        return Life::Exiting;
    }
    let Ok(status) = read_proc_file(&format!("/proc/{pid}/status")) else {
        // Gone between the two reads (its start time was right a moment ago).
        return Life::Gone;
    };
    if kill_pending(&status) {
        Life::Exiting
    } else {
        Life::Running
    }
}

/// Whether `/proc/<pid>/status` text shows a SIGKILL pending, for the thread (`SigPnd`) or
/// for the whole process (`ShdPnd`).
fn kill_pending(status: &str) -> bool {
    status.lines().any(|line| {
        let Some((name, mask)) = line.split_once(':') else {
            return false;
        };
        matches!(name, "SigPnd" | "ShdPnd")
            && u64::from_str_radix(mask.trim(), 16).is_ok_and(|m| m & SIGKILL_PENDING != 0)
    })
}

/// Whether the state letter of `/proc/<pid>/stat` (field 3) is that of a process that has ended:
/// `Z` (zombie: exited, not reaped yet), `X` or `x` (dead, being reaped).
pub(super) fn ended(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// Fields 3 (state letter) and 22 (start time, clock ticks since boot) of `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, u64)> {
    stat_fields(pid).map(|s| (s.state, s.start))
}

/// Fields 3, 9 and 22 of `/proc/<pid>/stat`, from one read.
struct StatFields {
    /// Field 3, the state letter (see [`ended`]).
    state: char,
    /// Field 9, the kernel's flags for the process (its main thread's).
    flags: u64,
    /// Field 22, the start time in clock ticks since boot.
    start: u64,
}

/// [`StatFields`] of `pid`; `None` when there is no such process or the file cannot be parsed.
/// The file is parsed after the last `)`, since the command name in field 2 may itself contain
/// spaces and parentheses.
fn stat_fields(pid: i32) -> Option<StatFields> {
    if pid <= 0 {
        return None;
    }
    let stat = read_proc_file(&format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts with field 3 (state): field 9 is the 7th item, field 22 the 20th.
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let flags = fields.nth(5)?.parse().ok()?;
    let start = fields.nth(12)?.parse().ok()?;
    Some(StatFields {
        state,
        flags,
        start,
    })
}

/// Reads a small `/proc` file (a `stat` line, a list of children) whole: into a buffer of 1 KiB first, so that
/// reading it takes one `read` and the one that sees its end. `std::fs::read_to_string` asks
/// for the size first, which `/proc` reports as 0, and then reads in growing steps from
/// 32 bytes: six system calls for a `stat` line, and the daemon and each shim read one per run.
///
/// Errors: the file cannot be opened or read, or is not UTF-8.
pub(super) fn read_proc_file(path: &str) -> io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::with_capacity(1024);
    std::fs::File::open(path)?.read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Makes the process `cmd` spawns call [`new_session`] between fork and exec, so that it leads
/// its own session: out of reach of signals sent to the spawner's terminal or process group,
/// and alive through the spawner's death. A failure there fails the spawn with its error.
pub fn spawn_in_new_session(cmd: &mut Command) {
    // SAFETY: the hook runs in the child between fork and exec, where only async-signal-safe
    // calls are allowed (the spawner may have other threads); setsid(2) is one, and the hook
    // neither allocates nor takes a lock.
    unsafe { cmd.pre_exec(new_session) };
}

fn to_pid(raw: i32) -> io::Result<Pid> {
    if raw <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a process id: {raw}"),
        ));
    }
    Pid::from_raw(raw).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))
}

fn to_rustix(signal: Signal) -> io::Result<rustix::process::Signal> {
    rustix::process::Signal::from_named_raw(signal as i32)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}

#[cfg(test)]
mod tests;
