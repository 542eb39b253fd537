//! Every raw system call of the supervisor lives here, behind safe functions; nothing outside
//! calls libc directly.
//!
//! The calls go through `rustix` where it offers them (descriptors, locks, sockets, processes),
//! through `nix` for signal sets and masks and for `sysconf` (which rustix leaves to the C
//! library), and straight to libc only where neither crate offers the call: `fork`, `_exit`,
//! signal dispositions, `sigtimedwait`, `close_range`, the rewrite of the process's own
//! command line, and `waitid` where the pid of the waitable child is needed (rustix's status
//! does not carry it). Each of those `unsafe` blocks says why it is sound.
//!
//! Why raw calls at all: fleet needs what std does not offer — `flock` (and, in the run
//! records' own crate, byte-range OFD locks: `runrecord::ofd`), `fork`, a `vfork`-style `clone`
//! for the command's start (std's `Command` falls back to a full fork as soon as the child must
//! run code of ours, and the parent-death signal needs that), `prctl` (the parent-death signal,
//! process names, the child subreaper), signal masks and dispositions, `sigtimedwait` and
//! `signalfd`, passing descriptors over a socket, and `execv` (the fork server's program).
//!
//! Five functions are `unsafe fn` on purpose, because their soundness depends on the state of
//! the whole process, which no check can prove: [`files::close_from`] and
//! [`files::keep_only_stdio_and`] close descriptors by number, and
//! [`files::take_inherited_socket`] takes one by number, which is sound only where nothing in
//! the process owns them (the start of a shim, the start of the fork server and of its
//! program); [`process::fork_single_threaded`] and
//! [`process::set_process_name_single_threaded`] require a process with one thread. Their
//! callers say why in a `// SAFETY:` comment. Every `unsafe` block carries one too, saying why
//! the call is sound (for code that runs between `fork` and `exec`: that it makes only
//! async-signal-safe calls; for the clone's child, which shares the shim's memory, also that it
//! allocates nothing and writes only its own stack and the one error field of its plan). The
//! workspace lints `clippy::undocumented_unsafe_blocks` and `unsafe_op_in_unsafe_fn` make a
//! missing comment, or an unsafe call slipped into the body of an `unsafe fn` without its own
//! block, fail the build's clippy step.
//!
//! What this layer must never do: decide anything. It knows nothing of runs, claims or shims;
//! it imports nothing else from the crate, so every other module may use it without a cycle.
//!
//! Some of these functions run in a child between `fork` (or [`spawn`]'s clone) and `exec`, where
//! only async-signal-safe calls are allowed; each such function says so in its documentation,
//! and keeps to system calls and the C library's async-signal-safe functions (no allocation, no
//! lock).
//!
//! * [`signals`]: signal masks, dispositions, and waiting for a signal synchronously.
//! * [`process`]: fork, exit, sessions, the parent-death signal, signalling and waiting for
//!   processes, process names, a process's start time and whether it still runs, and the exec
//!   size limit.
//! * [`files`]: `flock` locks, pipes, closing inherited descriptors, access checks, and whether
//!   a pipe's reader is gone.
//! * [`spawn`]: starting a run's command from the shim with a `vfork`-style clone, clean (mask,
//!   dispositions), in its own process group and tied to the shim by the parent-death signal.
//! * [`fdpass`]: `SOCK_SEQPACKET` socket pairs, and messages that carry a descriptor
//!   (`SCM_RIGHTS`).
//! * [`readiness`]: waiting on a pipe and on blocked signals at once (`signalfd`, `poll`), and
//!   non-blocking reads.
//! * [`subreaper`]: a process as the child subreaper of its descendants: reaping the orphans it
//!   adopts, and ending every child it has left.
//! * [`settings`]: the settings a child inherits and another process may change from outside
//!   (limits, priorities, CPUs, cgroup), read so that two moments can be compared.

pub mod fdpass;
pub mod files;
pub mod process;
pub mod readiness;
pub mod settings;
pub mod signals;
pub mod spawn;
pub mod subreaper;
