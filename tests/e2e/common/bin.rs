//! Which `fleet` binary the tests run: the one cargo built next to the test executable, or
//! `FLEET_BIN`; and, for long tests, a private copy of it.
//!
//! Why a private copy: other builds share target/<profile>/fleet. A `cargo build` or `cargo
//! test` elsewhere replaces it while a long test runs (for a moment it is missing, and the new
//! one may lack the `failpoints` feature). A test that starts hundreds of `fleet` processes over
//! a minute copies the binary once and makes the copy the binary of its whole test process
//! ([`choose_bin`], read each time a `fleet` process is started); the test processes of one
//! build share one copy ([`private_copy`]). This module never deletes a copy a live test process
//! may still run.
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

/// A private copy of `source`, and of the fork server's program beside it when there is one,
/// in `<dir>/<this pid>/` (so that the copy finds its fork server program beside it as an
/// installed `fleet` does), and returns the copy of `source`.
///
/// The files there are hard links to one copy per build of `source` (`<dir>/build-<key>/`, the
/// key taken from the files' size, modification time and inode), which every test process of
/// that build shares: a copy is some 250 MB with debug information, and each test that wants
/// one used to write its own. The shared copy is made in a folder of this process's and renamed
/// into place whole, so one that exists is complete; nothing ever writes to it again.
///
/// Removes what no live test process uses: the folders of test processes that are gone, and
/// the copies of earlier builds that no such folder links to. Retries for up to 10 s while a
/// file is missing (being relinked); `Err` says why the copy could not be made.
pub fn private_copy(source: &Path, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let program = source.with_file_name(FORK_SERVER_PROGRAM);
    let own = dir.join(std::process::id().to_string());
    let mut last = String::new();
    // A shared copy that another process removed (an earlier build's, as the build changed in
    // between) is made again.
    for _ in 0..3 {
        let key = build_key(&[source, &program])?;
        sweep(dir, &key);
        let build = shared_copy(source, &program, dir, &key)?;
        let _ = std::fs::remove_dir_all(&own);
        std::fs::create_dir_all(&own).map_err(|e| format!("{}: {e}", own.display()))?;
        let mut names = vec!["fleet"];
        if build.join(FORK_SERVER_PROGRAM).exists() {
            names.push(FORK_SERVER_PROGRAM);
        }
        match names
            .iter()
            .try_for_each(|n| std::fs::hard_link(build.join(n), own.join(n)))
        {
            Ok(()) => return Ok(own.join("fleet")),
            Err(e) => {
                last = format!(
                    "linking the copy in {} to {}: {e}",
                    build.display(),
                    own.display()
                )
            }
        }
    }
    Err(last)
}

/// What tells one build of `files` from another: size, modification time and inode of each (a
/// file that is missing counts as such).
fn build_key(files: &[&Path]) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let mut key = String::new();
    for f in files {
        match std::fs::metadata(f) {
            Ok(m) => key += &format!("{}-{}.{}-{}-", m.len(), m.mtime(), m.mtime_nsec(), m.ino()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => key += "none-",
            Err(e) => return Err(format!("{}: {e}", f.display())),
        }
    }
    key.pop();
    Ok(key)
}

/// The shared copy of this build (`key`) of `source` and `program`: `<dir>/build-<key>/`, made
/// now if there is none yet.
fn shared_copy(source: &Path, program: &Path, dir: &Path, key: &str) -> Result<PathBuf, String> {
    let build = dir.join(format!("build-{key}"));
    if build.join("fleet").is_file() {
        return Ok(build);
    }
    let tmp = dir.join(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    if program.exists() {
        copy_file(program, &tmp.join(FORK_SERVER_PROGRAM))?;
    }
    copy_file(source, &tmp.join("fleet"))?;
    if let Err(e) = std::fs::rename(&tmp, &build) {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another test process made it meanwhile: theirs is as good.
        if !build.join("fleet").is_file() {
            return Err(format!("{} to {}: {e}", tmp.display(), build.display()));
        }
    }
    Ok(build)
}

/// Removes, in `dir`, the folders of test processes that are gone (`<pid>/`, `tmp-<pid>/`) and
/// the shared copies of builds other than `key` that no test process's folder links to. An
/// unlinked executable keeps running, so removing a file a process runs is safe; a process
/// whose shared copy goes before it linked it makes another.
fn sweep(dir: &Path, key: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let me = std::process::id() as i32;
    let mut builds = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid: Option<i32> = name.strip_prefix("tmp-").unwrap_or(&name).parse().ok();
        if pid.is_some_and(|p| p != me && process_gone(p)) {
            let _ = std::fs::remove_dir_all(e.path());
        } else if name.starts_with("build-") && name != format!("build-{key}") {
            builds.push(e.path());
        }
    }
    for b in builds {
        // Linked from a live process's folder: in use.
        if std::fs::metadata(b.join("fleet")).is_ok_and(|m| m.nlink() > 1) {
            continue;
        }
        let _ = std::fs::remove_dir_all(b);
    }
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
