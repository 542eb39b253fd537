//! Which `fleet` binary the tests run: the one cargo built next to the test executable, or
//! `FLEET_BIN`; and, for long tests, a private copy of it.
//!
//! Why a private copy: other builds share target/<profile>/fleet. A `cargo build` or `cargo
//! test` elsewhere replaces it while a long test runs (for a moment it is missing, and the new
//! one may lack the `failpoints` feature). A test that starts hundreds of `fleet` processes over
//! a minute copies the binary once and makes the copy the binary of its whole test process
//! ([`choose_bin`], read each time a `fleet` process is started). This module never deletes a
//! copy a live test process may still run.
//!
//! The choice is kept in this process, not in its environment: every end-to-end test is in one
//! test binary, whose tests `cargo test` runs as threads of one process, and setting an
//! environment variable while other threads read the environment is a data race.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use super::process_gone;

/// Where cargo puts the `fleet` binary for this test: the test executable is
/// `target/<profile>/deps/<test>-<hash>`, the binary `target/<profile>/fleet`. The file may be
/// missing (not built yet, or being relinked by another build).
pub fn shared_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe
        .parent()
        .expect("test executable has a folder")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("fleet")
}

/// The binary every test of this process runs once one has chosen it ([`choose_bin`]).
static CHOSEN: OnceLock<PathBuf> = OnceLock::new();

/// Makes `bin` the `fleet` binary of every later test of this process, unless a binary was
/// chosen already; returns the one chosen. `FLEET_BIN`, when set, still wins.
pub fn choose_bin(bin: PathBuf) -> PathBuf {
    CHOSEN.get_or_init(|| bin).clone()
}

/// The binary a test of this process chose with [`choose_bin`], if any.
pub fn chosen_bin() -> Option<PathBuf> {
    CHOSEN.get().cloned()
}

/// The `fleet` binary to run: `FLEET_BIN` when set, else the one this process chose
/// ([`choose_bin`]), else [`shared_path`]. Panics, saying how to build it, when the shared
/// binary is missing.
pub fn fleet_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FLEET_BIN") {
        return PathBuf::from(p);
    }
    if let Some(p) = chosen_bin() {
        return p;
    }
    let bin = shared_path();
    if !bin.is_file() {
        panic!(
            "the fleet binary is missing at {}: build it first (`cargo build -p fleet`, or run the \
             tests with `cargo test --workspace --all-features` / `cargo nextest run --workspace \
             --all-features`, which build it), or point FLEET_BIN at it",
            bin.display()
        );
    }
    bin
}

/// Copies `source`, and the fork server's program beside it when there is one, into
/// `<dir>/<this pid>/` (so that the copy finds its fork server program beside it as an
/// installed `fleet` does), removing the copies of test processes that are gone, and returns
/// the copy of `source`. Retries for up to 10 s while a file is missing (being relinked); `Err`
/// says why the copy could not be made.
pub fn private_copy(source: &Path, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let pid: Option<i32> = e.file_name().to_str().and_then(|n| n.parse().ok());
            // An unlinked executable keeps running, so removing a dead process's copy is safe.
            if pid.is_some_and(|p| p != std::process::id() as i32 && process_gone(p)) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let own = dir.join(std::process::id().to_string());
    std::fs::create_dir_all(&own).map_err(|e| format!("{}: {e}", own.display()))?;
    let program = source.with_file_name(FORK_SERVER_PROGRAM);
    if program.exists() {
        copy_file(&program, &own.join(FORK_SERVER_PROGRAM))?;
    }
    let copy = own.join("fleet");
    copy_file(source, &copy)?;
    Ok(copy)
}

/// The fork server's own program, installed beside `fleet`.
pub const FORK_SERVER_PROGRAM: &str = "fleet-forksrv";

/// Copies `source` to `target`, retrying for up to 10 s while `source` is missing (being
/// relinked by another build).
fn copy_file(source: &Path, target: &Path) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..200 {
        match std::fs::copy(source, target) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("copying {} to {}: {e}", source.display(), target.display()),
        }
        // The source is being relinked by another build: look again shortly.
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(last)
}

/// The folder for private copies: `private-bin` next to the shared binary.
pub fn copies_dir(shared: &Path) -> PathBuf {
    shared
        .parent()
        .expect("the fleet binary has a folder")
        .join("private-bin")
}

/// Once per test process: unless the caller set `FLEET_BIN` or a test of this process chose a
/// binary already, make a private copy of the shared binary the one every test of this process
/// runs. Call first in every test of a file that uses it; panics if no copy can be made.
pub fn use_private_bin() {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let r = DONE.get_or_init(|| {
        if std::env::var_os("FLEET_BIN").is_some() || chosen_bin().is_some() {
            return Ok(());
        }
        let shared = shared_path();
        let copy = private_copy(&shared, &copies_dir(&shared))?;
        // The harness reads the choice each time it starts `fleet`.
        choose_bin(copy);
        Ok(())
    });
    if let Err(e) = r {
        panic!("{e}");
    }
}
