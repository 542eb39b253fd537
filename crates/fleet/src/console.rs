//! The one way the `fleet` binary writes to its standard output and standard error.
//!
//! Nothing else in the binary prints: `print!`, `println!` and `eprintln!` panic when the write
//! fails, and a write fails whenever the reader is gone — `fleet runs | head -n 1`, a pager quit
//! early, a daemon started with its stderr on a pipe nobody reads any more. Here a reader that
//! left (EPIPE) is a normal end: the command stops at once, prints nothing more, and exits
//! [`crate::failure::READER_GONE`] (141, as a shell reports `cat` killed by SIGPIPE in the same
//! place). Any other write error on stdout fails the command (exit 1). Stderr is best effort:
//! what a command has to say there is never worth a panic or a change of exit status.

use std::fmt::Display;
use std::io::{self, Write};

use crate::failure::Failure;

/// The failure for an error writing to stdout: [`Failure::reader_gone`] for EPIPE, exit 1
/// naming stdout otherwise.
pub fn stdout_failure(e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Failure::reader_gone()
    } else {
        Failure::action(format!("cannot write to standard output: {e}"))
    }
}

/// Writes `text` to stdout as it is, and flushes it.
///
/// Errors: [`stdout_failure`].
pub fn print(text: &str) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(stdout_failure)
}

/// Writes `bytes` to stdout as they are (a log need not be UTF-8), and flushes them.
///
/// Errors: [`stdout_failure`].
pub fn write_bytes(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(stdout_failure)
}

/// Writes `line` and a newline to stdout, and flushes it.
///
/// Errors: [`stdout_failure`].
pub fn println(line: impl Display) -> Result<(), Failure> {
    print(&format!("{line}\n"))
}

/// Writes `line` and a newline to stderr, ignoring any failure: a reader of stderr that left
/// must not turn a command's result into a different one.
pub fn eprintln(line: impl Display) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Whether the reader of stdout has gone, found without writing (see
/// `supervisor::sys::files::reader_gone`): for a command that may have nothing to print for a
/// long time.
pub fn stdout_reader_gone() -> bool {
    supervisor::sys::files::reader_gone(io::stdout())
}
