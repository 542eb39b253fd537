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
//! Two functions are `unsafe fn` on purpose: [`files::close_from`] and
//! [`files::keep_only_stdio_and`] close descriptors by number, which is sound only where nothing
//! in the process owns them (the start of a shim, the start of the fork server); no check can
//! prove that, so their callers state it in a `SAFETY` comment.
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
