//! The fork server: a small single-threaded process, forked from `fleet daemon` before its
//! async runtime exists (and before it reads its config, which the server would otherwise carry
//! into every fork), that forks each run's shim on the daemon's request — so that starting a
//! run costs one fork of a small process instead of an exec of the whole fleet binary. It holds
//! nothing (no database, no daemon lock, no runtime, no config), and stays that way.
//!
//! Why. An exec of the fleet binary costs more CPU than a short command itself (the dynamic
//! loader's relocations, the C library's start-up probes; docs/PERFORMANCE.md), and forking the
//! daemon itself is unsafe once it has threads (only the forking thread survives in the child,
//! with whatever locks the others held).
//!
//! Its image. Forked, the server at once execs its own small program, [`PROGRAM`]
//! (`fleet-forksrv`, installed beside `fleet`; [`program_main`] is its entry): a tenth of
//! fleet's code, and a fork copies the page tables of what the forking process has mapped
//! ([`Image`]). Its first message, the hello, carries its version and build identity
//! (`build.rs`: a hash of the sources, the locked dependencies and the features, which both
//! binaries link from one compilation); a program that is missing, cannot be run, is of another
//! build (a `fleet-forksrv` left from an older install, or not rebuilt by a `cargo run` that
//! builds `fleet` alone) or says nothing is killed and reaped, and the server is forked again to
//! serve from the daemon's own image, [`Image::Own`], slower, with the reason for the daemon's
//! log. A request is laid out by [`ShimArgs::encode`], which only the same build is sure to
//! read alike, so the daemon never uses a server of another build. [`ForkServer::start`]
//! refuses in a process with more than one thread; without any server the daemon execs shims.
//!
//! Protocol, over a `SOCK_SEQPACKET` socket pair (one message per request or reply):
//!
//! * request: the shim's arguments and its environment changes ([`ShimArgs::encode`]), with one
//!   descriptor attached (`SCM_RIGHTS`): the write end of a pipe the daemon reads. It becomes
//!   the shim's stdout, so the daemon reads the shim's `running PID` line from it, and its
//!   end-of-file tells the daemon the shim is gone — the same as for a shim the daemon starts
//!   itself.
//! * reply: the shim's pid (8 bytes, native order), or a negative errno if the fork failed.
//!
//! Between the server and a shim whose run has ended (`IdleShims`, `shim::idle`): the shim
//! sends its pid, with one end of a socket pair of its own attached, on a socket pair the
//! server made at its start and every shim inherits; the server sends the next request on that
//! socket, waits at most [`ANSWER_WITHIN`] for the shim's one-byte answer, and only then sends
//! the report pipe and replies to the daemon with the shim's pid. A shim that does not answer
//! takes nothing, and the request goes to another shim or to a new fork.
//!
//! The server ignores SIGCHLD, so the kernel reaps its children (no zombies, no wait loop), and
//! the termination signals, so it lives exactly as long as the daemon: when the daemon's end of
//! the socket closes (exit or crash), the server's next receive reads end-of-file and it exits
//! (and a parent-death SIGKILL ends it should it be stopped). Its shims are in their own
//! sessions and outlive both, as shims always do.
//!
//! Never starting anything twice: a request whose outcome is unknown (sent, but no reply) may
//! still have forked a shim, so the daemon never starts a second shim for the same claim; it
//! waits for the pipe's end-of-file and lets the run files say what happened (`settle::settle`:
//! no `started` record ⇒ tombstone and requeue).
//!
//! Deadlines. The daemon waits at most [`REPLY_TIMEOUT_SECS`] in all for an answer
//! (`fdpass::recv_within`: a signal interrupts the receive and the kernel would start the
//! socket's timeout over, so reloads sent every few seconds would otherwise freeze the loop for
//! as long as they came). A later answer counts as none ([`ForkServerError::Unknown`]): the
//! daemon ends the server ([`ForkServer::kill`]: the unread request, and the pipe end it
//! carries, die with it) and execs shims from then on. So does a server whose own settings
//! (limits, priority, CPUs, cgroup…) a command changed through its grandparent's pid: it
//! compares them with those at its start before each fork, and stops when they differ.
//!
//! Every system call here goes through [`crate::sys`]; this module owns the protocol and the
//! server's life, and must never take a lock, open the database or start a thread in the
//! server.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::args::MAX_REQUEST;
use super::ShimArgs;
use crate::sys::process::{self, Forked};
use crate::sys::signals::{self, Signal};
use crate::sys::{fdpass, files, readiness, settings};

/// How long the daemon waits for the fork server's answer, in seconds. A fork takes well under
/// a millisecond; past this the request counts as unanswered ([`ForkServerError::Unknown`]) and
/// the daemon stops using the server.
pub const REPLY_TIMEOUT_SECS: u64 = 5;

/// The daemon's end of a running fork server.
#[derive(Debug)]
pub struct ForkServer {
    socket: OwnedFd,
    pid: i32,
    image: Image,
}

/// The file name of the fork server's own program, installed next to the `fleet` binary
/// (`cargo build` and `cargo install` put both in one folder; docs/OPERATIONS.md installs
/// both).
pub const PROGRAM: &str = "fleet-forksrv";

/// The one argument the daemon runs [`PROGRAM`] with; anything else is someone running it by
/// hand, which it refuses.
pub const SERVE_ARG: &str = "--serve-fork-requests";

/// The descriptor [`PROGRAM`] finds its socket on.
const PROGRAM_SOCKET_FD: i32 = 3;

/// What a server announces in its hello, and the daemon requires: the version and this
/// build's identity (`build.rs`: a hash of the sources, the locked dependencies and the
/// features). Requests are [`ShimArgs::encode`]d, whose layout only the same build is sure to
/// read alike, and a shim of another build would behave as that build does.
const IDENTITY: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("FLEET_BUILD_ID"));

/// Which image a fork server forks shims from.
///
/// Why a program of its own: a fork costs in proportion to what the forking process has mapped
/// (page tables, copy-on-write faults on the pages the child writes), and the fleet binary is
/// ten times the size of the code a shim runs. The daemon's image remains the fallback, so a
/// `fleet` binary copied alone still works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// [`PROGRAM`], at this path: the small image.
    Program(PathBuf),
    /// A forked copy of the daemon before its runtime started, because of `why` (no program
    /// was found, or it could not be used).
    Own {
        /// Why the program does not serve, for the daemon's log.
        why: String,
    },
}

/// Where [`PROGRAM`] is expected for the `fleet` binary at `fleet_exe`: beside it.
pub fn program_beside(fleet_exe: &Path) -> PathBuf {
    fleet_exe.with_file_name(PROGRAM)
}

/// The first message a server sends: `IDENTITY program` or `IDENTITY own WHY`.
enum Hello<'a> {
    /// Served by [`PROGRAM`].
    Program,
    /// Served by the daemon's forked image; why (empty when no program was asked for).
    Own(&'a str),
}

impl<'a> Hello<'a> {
    fn encode(&self) -> Vec<u8> {
        match self {
            Hello::Program => format!("{IDENTITY} program"),
            Hello::Own(why) => format!("{IDENTITY} own {why}"),
        }
        .into_bytes()
    }

    /// (version, hello), or `None` for anything else.
    fn parse(said: &'a str) -> Option<(&'a str, Hello<'a>)> {
        let (version, rest) = said.split_once(' ')?;
        match rest.split_once(' ') {
            None if rest == "program" => Some((version, Hello::Program)),
            Some(("own", why)) => Some((version, Hello::Own(why))),
            _ => None,
        }
    }
}

/// Why a request to the fork server failed.
#[derive(Debug, thiserror::Error)]
pub enum ForkServerError {
    /// The request is larger than [`MAX_REQUEST`]: nothing was sent, the server is fine, and
    /// this one shim must be started another way.
    #[error("{0}")]
    TooLarge(#[source] io::Error),
    /// Nothing reached the server, so no shim exists: starting the shim another way is safe.
    #[error("the fork server did not take the request: {0}")]
    NotSent(#[source] io::Error),
    /// The request was sent but no pid came back: a shim may exist. Never start another one for
    /// the same claim; wait for the report pipe's end-of-file instead.
    #[error("the fork server took the request but gave no answer: {0}")]
    Unknown(#[source] io::Error),
    /// The server answered that its fork failed: no shim exists.
    #[error("the fork server could not fork: {0}")]
    ForkFailed(#[source] io::Error),
}

impl ForkServer {
    /// Starts the fork server: forks, and in the child execs `program` (the small
    /// [`PROGRAM`] binary installed next to `fleet`, see [`program_beside`]) to serve from.
    /// Without a program, or when it cannot be used (missing, not executable, of another
    /// build, silent), the forked child serves from the daemon's own image instead — the same
    /// protocol, slower forks ([`ForkServer::image`] says which and why).
    ///
    /// Call it while the process has exactly one thread — before any async runtime, logging
    /// thread or database pool exists — and before taking the daemon lock (the server must hold
    /// no descriptor but its socket and the standard three).
    ///
    /// Blocks until the server says it is ready (a few milliseconds; at most
    /// [`REPLY_TIMEOUT_SECS`] per try).
    ///
    /// Errors: the process already has more than one thread (forking then could leave the
    /// child with a lock some other thread held), creating the socket pair or the fork failed,
    /// or the server never said it was ready. The daemon then execs `fleet shim` for every run
    /// instead: slower, the same protocol.
    pub fn start(program: Option<&Path>) -> io::Result<ForkServer> {
        let why = match program {
            None => format!("no {PROGRAM} program was given"),
            Some(path) => match Self::start_serving(Some(path)) {
                Ok(server) => return Ok(server),
                Err(e) => e.to_string(),
            },
        };
        let mut server = Self::start_serving(None).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{e} (and before that, the program: {why})"),
            )
        })?;
        // The forked copy's own hello has no reason to give: the reason is the program's.
        if let Image::Own { why: reason } = &mut server.image {
            *reason = why;
        }
        Ok(server)
    }

    /// One try of [`ForkServer::start`]: forks, execs `program` in the child if given, and
    /// waits for the server's hello. A server that answers wrongly or not at all is killed and
    /// reaped here (on this thread: the caller is single-threaded and stays so).
    fn start_serving(program: Option<&Path>) -> io::Result<ForkServer> {
        // Everything the child needs is made before the fork.
        let program_c = match program {
            Some(path) => Some(CString::new(path.as_os_str().as_bytes()).map_err(|_| {
                io::Error::other(format!("{}: the path holds a NUL byte", path.display()))
            })?),
            None => None,
        };
        let serve_arg = CString::new(SERVE_ARG).expect("no NUL in SERVE_ARG");
        let (ours, theirs) = fdpass::seqpacket_pair()?;
        let parent = std::process::id() as i32;
        match process::fork()? {
            Forked::Child => {
                drop(ours);
                // Die with the daemon even if stopped or stuck (SIGKILL reaches a stopped
                // process; the end-of-file on the socket would not). The forking thread is the
                // daemon's main thread, which lives as long as the daemon. A refusal changes
                // nothing: the end-of-file still ends the server. The setting survives the exec
                // below (the program is not set-user-ID).
                let _ = process::die_with_parent();
                if process::parent_pid() != parent {
                    process::exit_now(0);
                }
                // SAFETY: every descriptor above the standard three but `theirs` is either one
                // nothing owns (inherited by the daemon) or owned by a frame of the daemon's code
                // below this one (the callers of `ForkServer::start`, in this copy of the
                // daemon). None of those frames ever runs again: the exec replaces them, and if
                // it fails `serve` never returns and leaves only through `process::exit_now`
                // (`_exit`), which runs no destructor.
                let socket = match unsafe { files::keep_only_stdio_and(theirs) } {
                    Ok(socket) => socket,
                    Err(_) => process::exit_now(1),
                };
                let own_why = match &program_c {
                    None => String::new(),
                    Some(program) => {
                        let failed = match files::keep_across_exec(&socket) {
                            Ok(()) => process::exec(program, &[program, &serve_arg]),
                            Err(e) => e,
                        };
                        format!("could not run it: {failed}")
                    }
                };
                serve(socket, Hello::Own(&own_why))
            }
            Forked::Parent(pid) => {
                drop(theirs);
                match Self::hello(&ours, program) {
                    Ok(image) => Ok(ForkServer {
                        socket: ours,
                        pid,
                        image,
                    }),
                    Err(e) => {
                        // Closing our end ends a server that works; SIGKILL one that does not
                        // read. Then reap it: no zombie is left.
                        drop(ours);
                        let _ = process::signal_process(pid, Signal::SIGKILL);
                        process::reap(pid);
                        Err(e)
                    }
                }
            }
        }
    }

    /// Waits for the server's hello on `socket` and says which image serves; sets the reply
    /// timeout every later request waits under.
    ///
    /// Errors: no hello within [`REPLY_TIMEOUT_SECS`], the server closed its socket, or it is
    /// of another build than this daemon (its requests could be read wrongly).
    fn hello(socket: &OwnedFd, program: Option<&Path>) -> io::Result<Image> {
        // A fork server that stops answering (stopped, starved) must not freeze the daemon's
        // loop: a reply that takes longer than this counts as no reply.
        fdpass::set_receive_timeout(socket, Duration::from_secs(REPLY_TIMEOUT_SECS))?;
        let shown = program.map_or_else(String::new, |p| p.display().to_string());
        let mut buf = [0u8; 512];
        let n = fdpass::recv_within(socket, &mut buf, Duration::from_secs(REPLY_TIMEOUT_SECS))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{shown}: no answer within {REPLY_TIMEOUT_SECS} s: {e}"),
                )
            })?;
        if n == 0 {
            return Err(io::Error::other(format!(
                "{shown}: it exited before serving"
            )));
        }
        let said = String::from_utf8_lossy(&buf[..n]);
        match Hello::parse(&said) {
            Some((version, _)) if version != IDENTITY => Err(io::Error::other(format!(
                "{shown} is version {version}, not {IDENTITY} (another build)"
            ))),
            Some((_, Hello::Program)) => match program {
                Some(path) => Ok(Image::Program(path.to_path_buf())),
                None => Err(io::Error::other("a program answered where none was run")),
            },
            Some((_, Hello::Own(why))) => Ok(Image::Own {
                why: if program.is_some() {
                    format!("{shown}: {why}")
                } else {
                    why.to_string()
                },
            }),
            None => Err(io::Error::other(format!(
                "{shown}: it answered {said:?}, not a fork server's hello"
            ))),
        }
    }

    /// Which image the server forks shims from.
    pub fn image(&self) -> &Image {
        &self.image
    }

    /// The server's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Ends a server the daemon gives up on (dead, or stopped or stuck with a request unread):
    /// SIGKILL, so that an unread request — and the report pipe's write end it carries — dies
    /// with it and the pipe reaches end-of-file; then reaps it on a thread of its own, so that no
    /// zombie is left. Safe because the server is the caller's child and not yet reaped: its pid
    /// cannot belong to another process. Call at most once.
    pub fn kill(&self) {
        let pid = self.pid;
        let _ = process::signal_process(pid, Signal::SIGKILL);
        let _ = std::thread::Builder::new()
            .name("forksrv-reaper".into())
            .spawn(move || process::reap(pid));
    }

    /// Asks the server to fork the shim for `args`, with `report` (the write end of the pipe
    /// the daemon reads) as its stdout. Returns the shim's pid.
    ///
    /// Blocks for one round trip (about as long as a fork of a small process), at most
    /// [`REPLY_TIMEOUT_SECS`]. Errors say whether a shim may exist ([`ForkServerError::Unknown`]:
    /// no answer, or none in time) or surely does not.
    pub fn spawn(&self, args: &ShimArgs, report: OwnedFd) -> Result<i32, ForkServerError> {
        let request = request(args).map_err(ForkServerError::TooLarge)?;
        fdpass::send_with_fd(&self.socket, &request, report.as_fd())
            .map_err(ForkServerError::NotSent)?;
        // Our copy of the write end must close, or the daemon would never see end-of-file.
        drop(report);
        let mut reply = [0u8; 8];
        let n = fdpass::recv_within(
            &self.socket,
            &mut reply,
            Duration::from_secs(REPLY_TIMEOUT_SECS),
        )
        .map_err(ForkServerError::Unknown)?;
        if n != reply.len() {
            return Err(ForkServerError::Unknown(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the fork server closed its socket",
            )));
        }
        match i64::from_ne_bytes(reply) {
            pid if pid > 0 => Ok(pid as i32),
            errno => Err(ForkServerError::ForkFailed(io::Error::from_raw_os_error(
                (-errno) as i32,
            ))),
        }
    }
}

/// The request for `args` ([`ShimArgs::encode`]). Error: larger than [`MAX_REQUEST`].
fn request(args: &ShimArgs) -> io::Result<Vec<u8>> {
    let out = args.encode();
    if out.len() > MAX_REQUEST {
        return Err(io::Error::other(format!(
            "the run's command and environment take {} bytes, above the fork server's {}",
            out.len(),
            MAX_REQUEST
        )));
    }
    Ok(out)
}

/// The entry point of [`PROGRAM`]: serves on the socket the daemon left on descriptor 3.
/// `args` are the program's arguments after its name. Returns (with the exit status, 2) only
/// when the program was not started by a daemon: then it says so on stderr and serves nothing.
pub fn program_main(args: &[std::ffi::OsString]) -> i32 {
    if args.len() != 1 || args[0] != SERVE_ARG {
        refuse(format_args!(
            "{PROGRAM}: `fleet daemon` starts this program itself; it is not run by hand"
        ));
        return 2;
    }
    // SAFETY: the first thing this program does: nothing in it has opened or taken a
    // descriptor yet, so descriptor 3, when open, is the one the daemon left.
    match unsafe { files::take_inherited_socket(PROGRAM_SOCKET_FD) } {
        Ok(socket) => serve(socket, Hello::Program),
        Err(e) => {
            refuse(format_args!(
                "{PROGRAM}: no fork server socket on descriptor {PROGRAM_SOCKET_FD} ({e}); \
                 `fleet daemon` starts this program itself"
            ));
            2
        }
    }
}

/// One line on stderr, for [`program_main`]'s refusals (best effort: no stderr, no line).
fn refuse(message: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(io::stderr(), "{message}");
}

/// The server's loop, in the forked child or in [`PROGRAM`]; `hello` says which. Never
/// returns.
fn serve(socket: OwnedFd, hello: Hello<'_>) -> ! {
    // The kernel reaps our children: a shim's exit reaches the daemon as end-of-file.
    signals::ignore(&[Signal::SIGCHLD]);
    // Live as long as the daemon does, not as long as its terminal or its service manager's
    // patience: the daemon's exit closes the socket, and that ends us.
    signals::ignore(&[
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ]);
    process::set_process_name(PROGRAM, &[PROGRAM]);
    // Keep the socket and the standard three; nothing else the daemon had open may reach a
    // shim (the daemon's own inherited descriptors included). If the daemon was started with a
    // standard descriptor closed, the socket took its number: it moves to 3 like any other.
    // SAFETY: every descriptor above the standard three but `socket` is either one nothing
    // owns (inherited) or owned by a frame of the daemon's code below this one (the callers of
    // `ForkServer::start`, in this copy of the daemon). None of those frames ever runs again:
    // `serve` never returns, and it leaves only through `process::exit_now` (`_exit`), which
    // runs no destructor.
    let socket = match unsafe { files::keep_only_stdio_and(socket) } {
        Ok(socket) => socket,
        Err(_) => process::exit_now(1),
    };
    // Failpoints (tests only) are read here, once: the shims forked below inherit them, and must
    // not set them up again (that lock is held by this guard, in every copy of this process).
    let _failpoints = crate::failpoints::scenario();
    // Every fork below starts from the dispositions as they stand now; each shim sets back to
    // the default exactly these, instead of asking for every signal, per run.
    let altered = signals::altered();
    // One thread, checked once: `ForkServer::start` forked this process from a single-threaded
    // daemon, and nothing here ever starts a thread (see the module's rule).
    if !process::thread_count().is_ok_and(|n| n == 1) {
        process::exit_now(1);
    }
    // The way back for shims whose run has ended: each such shim sends its pid here with one
    // end of a socket pair of its own, on which it then waits for its next run.
    let (back, shims_back) = match fdpass::seqpacket_pair() {
        Ok(pair) => pair,
        Err(_) => process::exit_now(1),
    };
    let mut idle = IdleShims::default();
    // What every shim must be forked with: a command that changes the server's own settings
    // through its grandparent's pid (`prlimit --pid`, `renice`) must not pass them on.
    let at_start = settings::own_settings();
    // Ready: say so, and who serves. A daemon that is gone is noticed by the receive below.
    let _ = fdpass::send(&socket, &hello.encode());
    let mut buf = vec![0u8; MAX_REQUEST];
    loop {
        let wait = idle.expire(Instant::now());
        let ready = match readiness::wait_readable(&[socket.as_fd(), back.as_fd()], wait) {
            Ok(ready) => ready,
            Err(_) => process::exit_now(1),
        };
        if ready[1] {
            idle.take_back(&back);
        }
        if !ready[0] {
            continue;
        }
        let (n, report) = match fdpass::recv_with_fd(&socket, &mut buf) {
            Ok(Some(got)) => got,
            // End-of-file: the daemon is gone. The idle shims' sockets close with us, and
            // that ends them.
            Ok(None) => process::exit_now(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => process::exit_now(1),
        };
        let mut changed = false;
        let reply: i64 = match (ShimArgs::decode(&buf[..n]), report) {
            (Some(args), Some(report)) => match idle.hand_over(&buf[..n], &report) {
                Some(pid) => pid as i64,
                // Refused, so that the daemon execs this shim; then the server ends, and the
                // daemon execs every later one.
                None if settings::own_settings() != at_start => {
                    changed = true;
                    -(libc::ECANCELED as i64)
                }
                // SAFETY: one thread, checked above, and none started since.
                None => match unsafe { process::fork_single_threaded() } {
                    Err(e) => -(e.raw_os_error().unwrap_or(libc::EAGAIN) as i64),
                    Ok(Forked::Child) => {
                        // SAFETY: the fresh fork, on its only thread (the server has one). The
                        // frames owning descriptors above stderr other than `report` and
                        // `shims_back` (this loop's sockets, the idle shims' sockets, the
                        // daemon's code below `serve`) never use or drop them again: `exit_now`
                        // (`_exit`, no destructors) follows at once, and `serve` never returns.
                        let code = unsafe {
                            super::forked::main_forked(&args, report, shims_back.as_fd(), &altered)
                        };
                        // Never back into the server's loop, never its destructors.
                        process::exit_now(code)
                    }
                    Ok(Forked::Parent(pid)) => {
                        drop(report);
                        fail::fail_point!("forkserver-after-fork", |_| std::process::abort());
                        pid as i64
                    }
                },
            },
            _ => -(libc::EINVAL as i64),
        };
        // A failed send means the daemon is gone; the next receive sees that.
        let _ = fdpass::send(&socket, &reply.to_ne_bytes());
        if changed {
            refuse(format_args!(
                "{PROGRAM}: its limits, priority, CPUs, cgroup or other settings were changed \
                 from outside since it started (by a command, through its grandparent's pid?); \
                 it stops, so that no shim is forked with them (the daemon execs shims from now on)"
            ));
            process::exit_now(1);
        }
    }
}

/// How long a shim whose run has ended waits for another before the server lets it go (closes
/// its socket, which ends it). Long enough to carry a busy minute's runs from one to the next;
/// short enough that a burst's shims do not linger.
pub const IDLE_FOR: Duration = Duration::from_secs(10);

/// How long the server waits for an idle shim to answer that it takes a request before it lets
/// that shim go and forks a new one instead. A shim answers within microseconds; this only
/// bounds the cost of one that was stopped or starved, well inside the daemon's
/// [`REPLY_TIMEOUT_SECS`].
pub const ANSWER_WITHIN: Duration = Duration::from_millis(500);

/// The shims waiting for a run, oldest first: the server hands a request to the newest (its
/// pages are the likeliest to be in the caches) and lets the oldest go after [`IDLE_FOR`].
///
/// Why shims are reused: a process per run costs its fork, the copy-on-write faults that follow,
/// and the teardown of its address space at exit — about 0.3 ms of CPU per run, some 13 % of a
/// drain of `true` (docs/PERFORMANCE.md, "What a process per run costs"). A shim that has finished its run (its `exit` record durable, its lock
/// released, its report pipe closed, so the daemon has everything it learns from a shim's end)
/// is the same clean process a fork would give, and can supervise the next run instead.
#[derive(Default)]
struct IdleShims {
    waiting: Vec<IdleShim>,
}

/// A shim waiting for its next run on `socket`.
struct IdleShim {
    pid: i32,
    socket: OwnedFd,
    since: Instant,
}

impl IdleShims {
    /// Takes back the shim that sent its socket on `back` (one message: its pid, with the
    /// socket attached). A message of any other shape is dropped, and with it the socket: the
    /// shim then reads end-of-file and exits.
    fn take_back(&mut self, back: &OwnedFd) {
        let mut pid = [0u8; 4];
        if let Ok(Some((4, Some(socket)))) = fdpass::recv_with_fd(back, &mut pid) {
            // Every wait for its answer is bounded (`hand_over`); a socket that refuses the
            // setting is dropped, which lets the shim go.
            if fdpass::set_receive_timeout(&socket, ANSWER_WITHIN).is_err() {
                return;
            }
            self.waiting.push(IdleShim {
                pid: i32::from_ne_bytes(pid),
                socket,
                since: Instant::now(),
            });
        }
    }

    /// Lets go of the shims idle for [`IDLE_FOR`] or longer (their sockets close: they exit);
    /// returns how long until the next one is due, `None` if no shim waits.
    fn expire(&mut self, now: Instant) -> Option<Duration> {
        self.waiting
            .retain(|shim| now.saturating_duration_since(shim.since) < IDLE_FOR);
        self.waiting
            .first()
            .map(|oldest| IDLE_FOR.saturating_sub(now.saturating_duration_since(oldest.since)))
    }

    /// Hands `request` and `report` to the newest idle shim that takes them, and returns its
    /// pid; `None` when none did (then the server forks one).
    ///
    /// Two steps: the request goes first, and the shim answers one byte once it has cleared
    /// the signals sent to it before (for its earlier run); only then does `report` follow,
    /// and with it the run. A shim whose socket reaches end-of-file has taken nothing (it
    /// exited) and the next one is asked. One that does not answer within [`ANSWER_WITHIN`]
    /// (stopped, or starved) is let go — its socket closed, so a late answer fails, or finds
    /// end-of-file where the report pipe would have come, and it starts nothing — and the
    /// request goes to a new fork: one slow shim costs one wait, and never holds a run.
    fn hand_over(&mut self, request: &[u8], report: &OwnedFd) -> Option<i32> {
        while let Some(shim) = self.waiting.pop() {
            if fdpass::send(&shim.socket, request).is_err() {
                continue;
            }
            let mut took = [0u8; 1];
            match fdpass::recv_within(&shim.socket, &mut took, ANSWER_WITHIN) {
                Ok(1) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                _ => continue,
            }
            if fdpass::send_with_fd(&shim.socket, &[1], report.as_fd()).is_err() {
                continue;
            }
            fail::fail_point!("forkserver-after-handover", |_| std::process::abort());
            return Some(shim.pid);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn hellos_read_back_as_sent_and_anything_else_is_refused() {
        let program = Hello::Program.encode();
        let said = String::from_utf8(program).unwrap();
        assert!(matches!(
            Hello::parse(&said),
            Some((IDENTITY, Hello::Program))
        ));
        let own = Hello::Own("could not run it: No such file").encode();
        let said = String::from_utf8(own).unwrap();
        assert!(matches!(
            Hello::parse(&said),
            Some((IDENTITY, Hello::Own("could not run it: No such file")))
        ));
        for junk in ["", "hello", "0.1.0", "0.1.0 program extra", "0.1.0 other"] {
            assert!(Hello::parse(junk).is_none(), "{junk:?}");
        }
    }

    #[test]
    fn oversized_requests_are_refused_before_sending() {
        let mut a = ShimArgs {
            state_dir: PathBuf::from("/var/lib/fleet"),
            run_id: 12,
            token: 99,
            timeout: None,
            kill_grace: Duration::from_secs(10),
            cwd: PathBuf::from("/srv"),
            max_log_size: None,
            argv: vec!["true".into()],
            env: Vec::new(),
            log: Default::default(),
        };
        assert!(request(&a).is_ok());
        a.env
            .push(("BIG".into(), Some("x".repeat(MAX_REQUEST).into())));
        assert!(request(&a).is_err());
    }
}
