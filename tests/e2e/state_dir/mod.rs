//! End-to-end tests of the state directory as the one source of truth about an install: who
//! holds it, whether it is still the one a daemon opened, and whether it could be read at all.
//!
//! Every test drives the real `fleet` binary (see tests/e2e/common/mod.rs). One module per rule:
//! - `exiting`: a daemon on its way out (killed, its exit not yet done) is waited for by the
//!   next one, a bounded time; a live one is refused at once;
//! - `zombie`: a daemon that died is not running, even before its parent reaps it — the
//!   state directory's lock says whether a daemon holds it, not a pid;
//! - `replaced`: a daemon whose state directory, database or lock is removed or replaced under
//!   it notices within a tick, says so and exits 1;
//! - `unreadable`: state that exists but may not be read is "permission denied", naming it,
//!   exit 1 — never an empty install, never "ok";
//! - `newer`: a database a newer fleet migrated is refused by every command and the daemon,
//!   naming it, exit 2, and left as it was;
//! - `read_only`: a command that only reads opens the state directory read-only: it reads one
//!   on a read-only file system, and leaves nothing behind where it could write;
//! - `private`: what fleet creates is private from its first byte, and fleet re-permissions
//!   nothing: a state directory others may write into is refused by what writes, read with a
//!   warning, and left as it is.

mod exiting;
mod newer;
mod private;
mod read_only;
mod replaced;
mod unreadable;
mod zombie;
