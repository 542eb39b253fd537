//! The `fleet` binary these tests run must have the failpoints compiled in: this checks it, builds
//! one when needed, and makes a private copy the binary of the whole test process.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::*;

/// Whether `bin` has the failpoints compiled in: a shim told to crash before its lock must
/// abort (without the feature it would just run `true`).
fn has_failpoints(bin: &Path) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut c = std::process::Command::new(bin);
    c.arg("shim")
        .arg("--state-dir")
        .arg(dir.path())
        .args([
            "--run-id",
            "1",
            "--token",
            "1",
            "--kill-grace",
            "1",
            "--cwd",
            "/",
            "--",
            "true",
        ])
        .env("FAILPOINTS", "shim-before-lock=return")
        .env(MARKER_VAR, "failpoints-probe");
    let out = run_with_deadline(c, CMD_DEADLINE);
    if out.status.signal() == Some(libc::SIGABRT) {
        Ok(())
    } else {
        Err(format!(
            "{} has no failpoints compiled in (a shim with FAILPOINTS=shim-before-lock=return \
             ended {} instead of aborting){}",
            bin.display(),
            out.status,
            out.stderr
        ))
    }
}

/// Once per test process: makes a private copy of a `fleet` binary with the failpoints compiled
/// in, and makes it the binary every test of the process runs (`choose_bin`), so that nobody
/// rebuilding target/debug/fleet (without the feature) while these tests run can pull the
/// failpoints from under them.
///
/// `FLEET_BIN` set by the caller, or a binary another test of this process chose, is used as it
/// is (it must have the failpoints). Otherwise target/<profile>/fleet is used when it has them;
/// when it has not (the last build of it was without `--features failpoints`, e.g. `cargo test
/// --all-features --test e2e failpoints::` alone does not rebuild it), this builds one with
/// `cargo build -p fleet --features failpoints` in a target directory of its own
/// (target/failpoints; slow the first time only).
pub fn require_failpoints() {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = BIN.get_or_init(|| {
        if std::env::var_os("FLEET_BIN").is_some() || chosen_bin().is_some() {
            let bin = fleet_bin();
            return has_failpoints(&bin).map(|()| bin);
        }
        let shared = shared_path();
        let profile_dir = shared.parent().unwrap().to_path_buf();
        let source = match has_failpoints(&shared) {
            Ok(()) => shared.clone(),
            Err(why) => {
                let target = profile_dir.parent().unwrap().join("failpoints");
                eprintln!(
                    "{why}\nbuilding one with the failpoints in {} (cargo build -p fleet \
                     --features failpoints)",
                    target.display()
                );
                let mut c = std::process::Command::new(env!("CARGO"));
                c.current_dir(env!("CARGO_MANIFEST_DIR"))
                    .args([
                        "build",
                        "-p",
                        "fleet",
                        "--features",
                        "failpoints",
                        "--target-dir",
                    ])
                    .arg(&target);
                let out = run_with_deadline(c, Duration::from_secs(1200));
                if out.code() != Some(0) {
                    return Err(format!("{why}\nand building one failed:\n{}", out.stderr));
                }
                target.join("debug").join("fleet")
            }
        };
        let copy = private_copy(&source, &copies_dir(&shared))?;
        has_failpoints(&copy)?;
        // Every test of this process uses the copy (the harness reads the choice each time it
        // starts `fleet`); or the binary another test chose meanwhile, if it has them too.
        let chosen = choose_bin(copy);
        has_failpoints(&chosen)?;
        Ok(chosen)
    });
    if let Err(e) = r {
        panic!("{e}");
    }
}
