//! Starting a run's command from the shim without copying the shim: a `vfork`-style clone
//! (`CLONE_VM | CLONE_VFORK`) whose child sets the command's process state up and execs it.
//!
//! Why not `std::process::Command`. The command needs two things between fork and exec that no
//! `posix_spawn` attribute gives: the parent-death signal (so that it dies with its shim) and
//! a check that the shim is still there once that signal is armed. With a `pre_exec` hook, std
//! falls back to a full `fork`: the kernel copies the shim's page tables, every page either
//! side writes afterwards takes a copy-on-write fault, and the exec then tears the copy down —
//! per run, on the path of every start (docs/PERFORMANCE.md has the profile). Here the child
//! borrows the shim's memory until its `execve`, as `posix_spawn` itself does, and the shim
//! sleeps meanwhile.
//!
//! The price is the discipline of a child that shares its parent's memory: everything it needs
//! (argv, environment, the paths to try, the descriptors) is built by the parent before the
//! clone, and the child only makes system calls — no allocation, no lock, no unwinding, no
//! Rust standard library beyond plain reads of what the parent prepared. Its errors travel
//! back in a field of that shared plan. The calling process must be single-threaded (the shim
//! is): the parent-death signal follows the thread that cloned.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use super::signals;

/// The stack the child runs on until its exec, bytes. The child calls a handful of C library
/// system-call wrappers, with small frames; this is many times what it uses.
const CHILD_STACK: usize = 64 * 1024;

/// The search path `execvp` uses when the environment has no `PATH` (the C library's default).
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// A command, prepared for [`spawn_tied`]: the program's candidate paths, argv and environment
/// as C strings, and the working directory. Built in the parent so that the child allocates
/// nothing.
#[derive(Debug)]
pub struct PreparedCommand {
    /// Where to look for the program, in order: the program itself when it holds a `/`, else
    /// each `PATH` entry joined with it (an empty entry is the working directory), as `execvp`
    /// does — with the command's own `PATH`.
    candidates: Vec<CString>,
    argv: Vec<CString>,
    env: Vec<CString>,
    cwd: CString,
    /// The signals whose disposition the child sets back to the default before its exec;
    /// `None`: every one (see [`PreparedCommand::reset_only`]).
    reset: Option<Vec<i32>>,
}

impl PreparedCommand {
    /// Prepares `argv` (the program first) to run in `cwd` with exactly the environment `env`.
    ///
    /// Errors (`InvalidInput`, nothing started): `argv` is empty, or an argument, an
    /// environment entry or `cwd` contains a NUL byte.
    pub fn new(
        argv: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &Path,
    ) -> io::Result<PreparedCommand> {
        let program = argv
            .first()
            .ok_or_else(|| invalid("the command has no program"))?;
        let argv = argv
            .iter()
            .map(|a| c_string(a.as_bytes().to_vec(), "an argument"))
            .collect::<io::Result<Vec<_>>>()?;
        let mut path = None;
        let env = env
            .iter()
            .map(|(k, v)| {
                // Names are passed as they come, as std's `Command` does: the inherited
                // environment may hold one that starts with `=`, and the config refuses such
                // names for the run's own variables.
                if k == "PATH" {
                    path = Some(v.as_bytes());
                }
                let mut entry = k.as_bytes().to_vec();
                entry.push(b'=');
                entry.extend_from_slice(v.as_bytes());
                c_string(entry, "an environment entry")
            })
            .collect::<io::Result<Vec<_>>>()?;
        let candidates = candidates(program, path.unwrap_or(DEFAULT_PATH))?;
        let cwd = c_string(cwd.as_os_str().as_bytes().to_vec(), "the working directory")?;
        Ok(PreparedCommand {
            candidates,
            argv,
            env,
            cwd,
            reset: None,
        })
    }

    /// Has the child set back to the default only `altered` (signal numbers) before its exec,
    /// instead of every signal: for a caller that knows which of its dispositions are not the
    /// default — every one, handlers included (a handler left in place could run in the child,
    /// in memory it shares with the caller, before the exec; an "ignore" left in place would
    /// survive the exec and reach the command).
    pub fn reset_only(mut self, altered: Vec<i32>) -> PreparedCommand {
        self.reset = Some(altered);
        self
    }
}

/// The command's standard descriptors, each above stderr in the parent (so that putting one in
/// place can never overwrite another still to be placed).
#[derive(Debug, Clone, Copy)]
pub struct StdFds<'a> {
    /// Becomes the command's standard input.
    pub stdin: BorrowedFd<'a>,
    /// Becomes the command's standard output.
    pub stdout: BorrowedFd<'a>,
    /// Becomes the command's standard error.
    pub stderr: BorrowedFd<'a>,
}

/// Starts `cmd` as a child of the calling process and returns its pid. Between the clone and
/// the exec, the child:
///
/// * clears its signal mask and sets every disposition to its default (SIGPIPE included; or
///   only those of [`PreparedCommand::reset_only`]): both survive exec, and a command must not
///   inherit a blocked SIGTERM or an ignored SIGINT;
/// * leads a process group of its own (so that a timeout or a cancel reaches whatever the
///   command starts, and the group can be swept when it ends);
/// * arms the parent-death signal (SIGKILL when the calling thread ends), then exits at once
///   with status 127 if the caller, whose pid is `parent`, is already gone (the signal would
///   never come) — a command never outlives its supervisor unnoticed;
/// * takes `fds` as its standard input, output and error, changes to the working directory,
///   and execs the first candidate path that can be executed (`execvp`'s rules: a missing file
///   or folder moves on, a permission refusal is remembered and moves on, anything else stops).
///   No shell is tried for a file that is not an executable: a script needs its `#!` line.
///
/// Every other descriptor of the caller must be close-on-exec (the shim's are).
///
/// Errors: a standard descriptor is stderr or below (`InvalidInput`); the clone failed; or the
/// child failed before its exec — the error is that step's (a missing working directory, the
/// program not found, `E2BIG` for arguments past the system's limit), the child is reaped, and
/// nothing ran.
///
/// The calling process must be single-threaded: the parent-death signal follows the thread
/// that cloned, and the child shares the caller's memory until its exec, which only a caller
/// that cannot run meanwhile (`CLONE_VFORK` suspends it) makes safe.
pub fn spawn_tied(cmd: &PreparedCommand, fds: StdFds<'_>, parent: i32) -> io::Result<i32> {
    let std_fds = [
        fds.stdin.as_raw_fd(),
        fds.stdout.as_raw_fd(),
        fds.stderr.as_raw_fd(),
    ];
    if std_fds.iter().any(|&fd| fd <= 2) {
        return Err(invalid(
            "a command's standard descriptors must be above stderr in the shim",
        ));
    }
    let candidates = null_terminated(&cmd.candidates);
    let argv = null_terminated(&cmd.argv);
    let envp = null_terminated(&cmd.env);
    let mut plan = Plan {
        candidates: candidates.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cmd.cwd.as_ptr(),
        reset: cmd.reset.as_deref().map(|r| (r.as_ptr(), r.len())),
        std_fds,
        parent,
        error: 0,
    };
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK);
    // The stack grows down on every architecture Linux runs this on: the child starts at the
    // top, aligned to 16 bytes as the C calling conventions ask.
    let top = ((stack.as_mut_ptr() as usize + CHILD_STACK) & !15) as *mut libc::c_void;
    // SAFETY: `child` only reads `plan` (through the pointer, which lives until after the clone
    // returns: CLONE_VFORK suspends this thread until the child has exec'd or exited) and the
    // C strings it points to, all built above and untouched meanwhile, and writes
    // `plan.error`. It runs on `stack`, memory of ours that nothing else uses. This process has
    // one thread (the caller's contract), so nothing else runs in the shared memory meanwhile.
    let pid = unsafe {
        libc::clone(
            child,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut plan as *mut Plan).cast(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the child wrote `error` (if at all) before its exec or exit, and the kernel
    // resumed us only after that; a volatile read keeps the compiler from assuming the field
    // still holds the 0 it was given.
    let error = unsafe { std::ptr::read_volatile(&plan.error) };
    drop(stack);
    if error != 0 {
        // The child has exited (status 127) without running anything: reap it.
        let _ = wait_child(pid);
        return Err(io::Error::from_raw_os_error(error));
    }
    Ok(pid)
}

/// Waits for the child `pid` to end and reaps it; returns its status. Retries on EINTR.
///
/// Errors: `pid` is not an unreaped child of this process (ECHILD).
pub fn wait_child(pid: i32) -> io::Result<ExitStatus> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waitpid writes the status into `status`, a live local.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return Ok(ExitStatus::from_raw(status));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What the child reads (all prepared by the parent) and the one field it writes.
struct Plan {
    /// Null-terminated array of candidate paths.
    candidates: *const *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// The signals to set back to the default (pointer and length of the parent's list);
    /// `None`: every one.
    reset: Option<(*const i32, usize)>,
    /// The descriptors that become 0, 1 and 2.
    std_fds: [libc::c_int; 3],
    parent: libc::c_int,
    /// The errno of the step that failed, 0 if none did (the child exec'd).
    error: libc::c_int,
}

/// The child, from the clone to its exec. Makes only system calls (through the C library's
/// thin wrappers); on any failure stores the errno in the plan and exits with 127.
extern "C" fn child(plan: *mut libc::c_void) -> libc::c_int {
    let plan = plan.cast::<Plan>();
    // SAFETY: `plan` points to the parent's `Plan`, alive and unchanged until we exec or exit
    // (the parent is suspended); every pointer in it is to the parent's live C strings. Only
    // `error` is written, and only through a raw pointer.
    unsafe {
        let error = prepare_and_exec(&*plan);
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*plan).error), error);
        libc::_exit(127)
    }
}

/// The child's steps (see [`spawn_tied`]); returns the errno of the one that failed (an exec
/// that succeeds never returns).
///
/// # Safety
///
/// Only in the child of [`spawn_tied`]'s clone, with `plan` as built there.
unsafe fn prepare_and_exec(plan: &Plan) -> libc::c_int {
    // The mask and the dispositions are this process's own (no CLONE_SIGHAND): changing them
    // leaves the shim's untouched. Dispositions first, so that no handler the shim inherited
    // could run here, in memory shared with it, once the mask opens. A failure leaves the mask
    // as it was, as std's hook did.
    match plan.reset {
        Some((list, len)) => {
            // SAFETY: the parent's list (`PreparedCommand::reset`), alive and unchanged until
            // the exec: the parent is suspended and keeps the command.
            signals::restore_defaults(unsafe { std::slice::from_raw_parts(list, len) })
        }
        None => signals::restore_all_defaults(),
    }
    let _ = signals::unblock_all();
    // SAFETY: plain system calls on values the parent prepared: C strings and null-terminated
    // arrays of them that live until the exec, and descriptors the parent holds open.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return errno();
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return errno();
        }
        if libc::getppid() != plan.parent {
            libc::_exit(127);
        }
        for (target, &fd) in plan.std_fds.iter().enumerate() {
            if libc::dup2(fd, target as libc::c_int) < 0 {
                return errno();
            }
        }
        if libc::chdir(plan.cwd) != 0 {
            return errno();
        }
        let mut refused = 0;
        let mut last = libc::ENOENT;
        let mut next = plan.candidates;
        while !(*next).is_null() {
            libc::execve(*next, plan.argv, plan.envp);
            match errno() {
                libc::EACCES => refused = libc::EACCES,
                e @ (libc::ENOENT
                | libc::ENOTDIR
                | libc::ESTALE
                | libc::ENODEV
                | libc::ETIMEDOUT) => last = e,
                other => return other,
            }
            next = next.add(1);
        }
        if refused != 0 {
            refused
        } else {
            last
        }
    }
}

/// The calling thread's errno. In the child this is the parent thread's errno variable (the
/// child shares its memory and thread pointer), which the suspended parent does not read.
fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns the calling thread's errno address, always valid.
    unsafe { *libc::__errno_location() }
}

/// The paths `execvp` would try for `program`, with `path` as the search path.
fn candidates(program: &OsStr, path: &[u8]) -> io::Result<Vec<CString>> {
    let program = program.as_bytes();
    if program.is_empty() {
        // execvp's answer for an empty name: nothing to try.
        return Ok(Vec::new());
    }
    if program.contains(&b'/') {
        return Ok(vec![c_string(program.to_vec(), "the program")?]);
    }
    path.split(|&b| b == b':')
        .map(|dir| {
            let mut full = dir.to_vec();
            if !full.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(program);
            c_string(full, "the program's path")
        })
        .collect()
}

/// Pointers to `strings`, then a null: the shape execve wants.
fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn c_string(bytes: Vec<u8>, what: &str) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| invalid(format!("{what} contains a NUL byte")))
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_execvp() {
        let c = |p: &str, path: &str| -> Vec<String> {
            candidates(OsStr::new(p), path.as_bytes())
                .unwrap()
                .into_iter()
                .map(|s| s.into_string().unwrap())
                .collect()
        };
        assert_eq!(c("true", "/usr/bin:/bin"), ["/usr/bin/true", "/bin/true"]);
        assert_eq!(c("./x", "/usr/bin"), ["./x"]);
        assert_eq!(c("a/b", ""), ["a/b"]);
        // An empty entry is the working directory.
        assert_eq!(c("x", ":/bin"), ["x", "/bin/x"]);
        assert!(c("", "/bin").is_empty());
    }

    #[test]
    fn bad_input_is_refused_before_anything_starts() {
        let cwd = Path::new("/");
        let nul = OsString::from("a\0b");
        assert!(PreparedCommand::new(&[], &[], cwd).is_err());
        assert!(PreparedCommand::new(std::slice::from_ref(&nul), &[], cwd).is_err());
        // An inherited name may start with `=`: passed on, not refused.
        let env = [(OsString::from("=weird"), OsString::from("c"))];
        assert!(PreparedCommand::new(&["true".into()], &env, cwd).is_ok());
        let env = [(OsString::from("A"), nul)];
        assert!(PreparedCommand::new(&["true".into()], &env, cwd).is_err());
    }

    /// Runs `argv` through [`spawn_tied`] with `env` in `cwd`, its output to a file; returns
    /// the status and what it wrote, or the spawn's error.
    fn run(argv: &[&str], env: &[(&str, &str)], cwd: &Path) -> io::Result<(ExitStatus, String)> {
        let tmp = tempfile::tempdir().unwrap();
        let out_path = tmp.path().join("out");
        let out = std::fs::File::create(&out_path).unwrap();
        let err = out.try_clone().unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        let env: Vec<(OsString, OsString)> =
            env.iter().map(|(k, v)| (k.into(), v.into())).collect();
        let cmd = PreparedCommand::new(&argv, &env, cwd)?;
        let fds = StdFds {
            stdin: null.as_fd(),
            stdout: out.as_fd(),
            stderr: err.as_fd(),
        };
        let pid = spawn_tied(&cmd, fds, std::process::id() as i32)?;
        let status = wait_child(pid)?;
        Ok((status, std::fs::read_to_string(&out_path).unwrap()))
    }

    use std::os::fd::AsFd;

    #[test]
    fn the_command_gets_its_argv_environment_folder_and_group() {
        let cwd = tempfile::tempdir().unwrap();
        let (status, out) = run(
            &[
                "sh",
                "-c",
                "echo \"$0 $1 $FOO ${HOME-unset}\"; pwd; ps -o pgid= -p $$; echo $$; exit 3",
                "a b",
                "c",
            ],
            &[("FOO", "bar"), ("PATH", "/usr/bin:/bin")],
            cwd.path(),
        )
        .unwrap();
        assert_eq!(status.code(), Some(3), "{out}");
        let lines: Vec<&str> = out.lines().collect();
        // Exactly the environment given: HOME was not.
        assert_eq!(lines[0], "a b c bar unset");
        assert_eq!(Path::new(lines[1]), cwd.path().canonicalize().unwrap());
        // It leads its own process group.
        assert_eq!(lines[2].trim(), lines[3].trim());
    }

    #[test]
    fn the_program_is_looked_up_in_the_commands_own_path() {
        let bin = tempfile::tempdir().unwrap();
        let tool = bin.path().join("only-here");
        std::fs::write(&tool, "#!/bin/sh\necho found\n").unwrap();
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = format!("/nonexistent:{}", bin.path().display());
        let (status, out) = run(&["only-here"], &[("PATH", &path)], Path::new("/")).unwrap();
        assert!(status.success());
        assert_eq!(out, "found\n");
        // Not on that PATH: not found, though the shim's own PATH has `true`.
        let e = run(&["true"], &[("PATH", "/nonexistent")], Path::new("/")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    /// Each failure before the exec comes back as that step's error, and nothing ran.
    #[test]
    fn failures_before_the_exec_are_the_spawns_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let path = [("PATH", "/usr/bin:/bin")];
        let e = run(&["true"], &path, &tmp.path().join("gone")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "missing folder: {e}");
        let e = run(&["no-such-program-here"], &path, tmp.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        let plain = tmp.path().join("not-executable");
        std::fs::write(&plain, "#!/bin/sh\ntouch ran\n").unwrap();
        let e = run(&[plain.to_str().unwrap()], &path, tmp.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        // No shell for a script without its `#!` line.
        let bare = tmp.path().join("bare");
        std::fs::write(&bare, "touch ran\n").unwrap();
        std::fs::set_permissions(&bare, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let e = run(&[bare.to_str().unwrap()], &path, tmp.path()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOEXEC), "{e}");
        assert!(!tmp.path().join("ran").exists());
        // A standard descriptor at or below stderr is refused before anything starts.
        let cmd = PreparedCommand::new(&["true".into()], &[], tmp.path()).unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: descriptor 2 is open for the whole test process; only borrowed here.
        let two = unsafe { BorrowedFd::borrow_raw(2) };
        let fds = StdFds {
            stdin: null.as_fd(),
            stdout: two,
            stderr: two,
        };
        let e = spawn_tied(&cmd, fds, std::process::id() as i32).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
