//! `fleet-forksrv`: the fork server's own program. `fleet daemon` starts it before its runtime
//! and asks it to fork each run's shim; it links only the shim and the server's loop, so each
//! fork copies a small process instead of the whole `fleet` binary. Installed next to `fleet`;
//! without it the daemon forks shims from its own image (slower). Not meant to be run by hand.

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let code = supervisor::shim::forkserver::program_main(&args);
    ExitCode::from(code.clamp(0, 255) as u8)
}
