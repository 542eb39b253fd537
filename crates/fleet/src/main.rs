//! `fleet`: the command line over the store, the packers and the supervisor.
//!
//! Exit status (docs/REFERENCE.md): 0 success; 1 the action failed or `check` found violations;
//! 2 bad usage or bad input, with a one-line message on stderr naming what was wrong; 141 the
//! reader of stdout left before the command was done (nothing more is printed).
//!
//! Everything the binary prints goes through [`console`]: no `print!`/`println!`/`eprintln!`,
//! which panic when their reader is gone. The lint below refuses them.
//!
//! `main` hands `fleet shim …` to `supervisor::shim::main` before anything else exists (no
//! runtime, no thread, no argument parser: the shim must stay single-threaded), and everything
//! else to [`cli`]; it prints a failure as `fleet: MESSAGE`. The fork server's own program is
//! the second binary, `bin/fleet-forksrv.rs`.
//!
//! # Layout
//!
//! - [`cli`]: the command line's clap definitions and the dispatch, nothing else.
//! - [`cmd`]: the commands, one file (or folder) per verb, each with its arguments; a command
//!   imports the modules below, never [`cli`] nor another command.
//! - [`ctx`]: where a command finds fleet.toml, the state directory and the store.
//! - [`failure`]: a command's failure, its exit status and message.
//! - [`console`]: the only writes to stdout and stderr.
//! - [`fit`]: the terminal tables' layout and width (`runs`, `projects`).
//! - [`queue`]: queueing a run by hand (`enqueue`, `rerun`).
//! - [`run_end`]: waiting for runs to end, and the exit status their end gives (`wait`,
//!   `enqueue --wait`).
//! - [`unreadable`]: rows a listing leaves out because fleet cannot read them (`runs`,
//!   `projects`).

#![deny(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)]

mod cli;
mod cmd;
mod console;
mod ctx;
mod failure;
mod fit;
mod queue;
mod run_end;
mod unreadable;

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The shim must run before anything else exists: no runtime, no threads. PR_SET_PDEATHSIG
    // follows the thread that forked, so the shim has to stay single-threaded.
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "shim") {
        // SAFETY: the first thing this process does: reading the arguments opened nothing, so
        // every descriptor above stderr is one it inherited, which nothing here owns or uses.
        let code = unsafe { supervisor::shim::main(&args[2..]) };
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    match cli::main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // An empty message: the command said all there was to say (`fleet wait`'s status).
            if !e.is_reader_gone() && !e.message.is_empty() {
                console::eprintln(format_args!("fleet: {}", e.message));
            }
            ExitCode::from(e.code)
        }
    }
}
