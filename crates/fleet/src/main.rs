//! `fleet`: the command line over the store, the packers and the supervisor.
//!
//! Exit status (docs/REFERENCE.md): 0 success; 1 the action failed or `check` found violations;
//! 2 bad usage or bad input, with a one-line message on stderr naming what was wrong.

mod cli;
mod output;

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The shim must run before anything else exists: no runtime, no threads. PR_SET_PDEATHSIG
    // follows the thread that forked, so the shim has to stay single-threaded.
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "shim") {
        let code = supervisor::shim::main(&args[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    match cli::main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}
