//! The settings a process inherits and that another process may change from outside: what a
//! reused shim and the fork server compare before they pass themselves on (see [`Settings`]).
//! Raw libc calls where rustix offers none, as in [`super::process`].

/// The settings of this process that another process may change from outside — `prlimit`,
/// `renice`, `chrt`, `taskset`, `ionice`, a write to `/proc/PID/oom_score_adj`,
/// `coredump_filter`, `autogroup` or `timerslack_ns`, a move to another cgroup — and that a
/// child inherits, or that its session's processes share. A reused shim compares them with what
/// they were when it was forked before it takes another run, and the fork server with its own
/// at its start before each fork: a command that changed them through its parent's (or
/// grandparent's) pid must not pass them on to later runs' commands. (What only a debugger
/// attached to the process could change — its umask, its no-new-privileges flag — is not
/// looked at: a debugger can change anything.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Every resource limit (soft, hard), in `RLIMIT_*` order.
    limits: Vec<(u64, u64)>,
    /// The nice value (`getpriority`), or the error number when it could not be read.
    nice: Result<i32, i32>,
    /// The scheduling policy (`sched_getscheduler`).
    policy: i32,
    /// The I/O priority (`ioprio_get`).
    io_priority: i64,
    /// The CPUs it may run on, as the kernel's mask.
    cpus: Vec<u8>,
    /// The whole `sched_attr` (`sched_getattr`: policy, nice, priority, runtime, utilisation
    /// clamps), as the kernel fills it.
    sched: Vec<u8>,
    /// The timer slack, in nanoseconds (`PR_GET_TIMERSLACK`).
    timer_slack: i32,
    /// `/proc/self/oom_score_adj`, `/proc/self/cgroup`, `/proc/self/coredump_filter` and
    /// `/proc/self/autogroup` (its nice value is the session's), as read (empty when
    /// unreadable).
    oom_score_adj: Vec<u8>,
    cgroup: Vec<u8>,
    coredump_filter: Vec<u8>,
    autogroup: Vec<u8>,
}

/// This process's [`Settings`], read now (about twenty system calls and four small `/proc`
/// files, about 20 µs). A value that cannot be
/// read is kept as the failure, so that two reads still compare.
pub fn own_settings() -> Settings {
    // RLIMIT_NLIMITS: the kernel's 16 limits (CPU … RTTIME).
    let limits = (0..16)
        .map(|resource| {
            // SAFETY: an all-zero `rlimit` is a valid value of this plain C struct, which the
            // call only writes.
            let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
            // SAFETY: `limit` is a live local the call writes into.
            if unsafe { libc::getrlimit(resource as _, &mut limit) } == 0 {
                (limit.rlim_cur as u64, limit.rlim_max as u64)
            } else {
                (u64::MAX - 1, u64::MAX - 1)
            }
        })
        .collect();
    let nice = rustix::process::getpriority_process(None).map_err(|e| e.raw_os_error());
    // SAFETY: plain system calls on this process (0), with no memory passed but `cpus`.
    let policy = unsafe { libc::sched_getscheduler(0) };
    // SAFETY: as above; IOPRIO_WHO_PROCESS is 1.
    let io_priority = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, 0) };
    // SAFETY: an all-zero `cpu_set_t` is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a live local of `size` bytes the call writes into.
    let cpus = if unsafe { libc::sched_getaffinity(0, size, &mut set) } == 0 {
        // SAFETY: `set` is `size` bytes of plain data.
        unsafe { std::slice::from_raw_parts((&set as *const libc::cpu_set_t).cast::<u8>(), size) }
            .to_vec()
    } else {
        Vec::new()
    };
    // struct sched_attr as of Linux 4.13 and later: 56 bytes; its first field is its size.
    let mut attr = [0u8; 56];
    // SAFETY: `attr` is a live buffer of the size passed, which the call writes into.
    let sched =
        if unsafe { libc::syscall(libc::SYS_sched_getattr, 0, attr.as_mut_ptr(), attr.len(), 0) }
            == 0
        {
            attr.to_vec()
        } else {
            Vec::new()
        };
    // SAFETY: plain calls that read this process's own values.
    let timer_slack = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    let read = |path: &str| {
        super::process::read_proc_file(path)
            .map(String::into_bytes)
            .unwrap_or_default()
    };
    Settings {
        limits,
        nice,
        policy,
        io_priority,
        cpus,
        sched,
        timer_slack,
        oom_score_adj: read("/proc/self/oom_score_adj"),
        cgroup: read("/proc/self/cgroup"),
        coredump_filter: read("/proc/self/coredump_filter"),
        autogroup: read("/proc/self/autogroup"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A setting changed from outside (here this test process's own nice value, which an
    /// unprivileged process may raise) shows in the next read.
    #[test]
    fn a_changed_setting_reads_differently() {
        let before = own_settings();
        assert_eq!(
            own_settings(),
            before,
            "two reads of unchanged settings differ"
        );
        let nice = rustix::process::getpriority_process(None).unwrap();
        rustix::process::setpriority_process(None, (nice + 1).min(19)).unwrap();
        if nice < 19 {
            assert_ne!(own_settings(), before);
        }
    }
}
