//! The shim as a stand-alone program, for the process-level tests in `tests/shim.rs` (which
//! find it next to the test binary, in the profile's `examples/` folder: `cargo test` builds
//! examples). Its arguments are those that follow `fleet shim`.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(supervisor::shim::main(&args));
}
