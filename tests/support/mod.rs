//! Helpers shared by tests/soak.rs and tests/failpoints.rs (the harness, tests/common, is
//! another engineer's): a private copy of the `fleet` binary, and who holds the daemon lock.
//!
//! Private copy: other builds share target/<profile>/fleet: a `cargo build` or `cargo test` elsewhere replaces
//! it while a long test runs (for a moment it is missing, and the new one may lack the
//! `failpoints` feature). A test that starts hundreds of `fleet` processes over a minute copies
//! the binary once and points `FLEET_BIN` (which the harness honours) at the copy.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use crate::common::process_gone;

/// Copies `source` to `<dir>/fleet-<this pid>`, removing the copies of test processes that are
/// gone, and returns the copy. Retries briefly while `source` is missing (being relinked).
pub fn private_copy(source: &Path, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let pid: Option<i32> = e
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("fleet-")?.parse().ok());
            // An unlinked executable keeps running, so removing a dead process's copy is safe.
            if pid.is_some_and(|p| p != std::process::id() as i32 && process_gone(p)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let copy = dir.join(format!("fleet-{}", std::process::id()));
    let mut last = String::new();
    for _ in 0..200 {
        match std::fs::copy(source, &copy) {
            Ok(_) => return Ok(copy),
            Err(e) => last = format!("copying {} to {}: {e}", source.display(), copy.display()),
        }
        // The source is being relinked by another build: look again shortly.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Err(last)
}

/// The folder for private copies: next to the shared binary.
pub fn copies_dir(shared: &Path) -> PathBuf {
    shared
        .parent()
        .expect("the fleet binary has a folder")
        .join("private-bin")
}

/// Where the harness finds the shared binary when `FLEET_BIN` is not set (the same rule as
/// `common::fleet_bin`, without its check that the file exists: it may be mid-relink).
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

/// Once per test process: unless the caller set `FLEET_BIN`, point it at a private copy of the
/// shared binary. Call first in every test of a file that uses it.
pub fn use_private_bin() {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let r = DONE.get_or_init(|| {
        if std::env::var_os("FLEET_BIN").is_some() {
            return Ok(());
        }
        let shared = shared_path();
        let copy = private_copy(&shared, &copies_dir(&shared))?;
        // The harness reads FLEET_BIN each time it starts `fleet`.
        std::env::set_var("FLEET_BIN", &copy);
        Ok(())
    });
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// Live processes with `path` (the state directory's daemon.lock) open: (pid, command line).
pub fn lock_holders(path: &Path) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for pid in crate::common::all_pids() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).ok().as_deref() == Some(path))
        {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if !process_gone(pid) {
                out.push((pid, cmd.trim().to_string()));
            }
        }
    }
    out
}

/// Whether nobody holds the flock on `path`: takes it (`LOCK_EX|LOCK_NB`) and lets it go at
/// once. Only for when no daemon is starting: a probe that holds the lock for an instant makes a
/// daemon starting at that instant refuse.
pub fn lock_is_free(path: &Path) -> bool {
    use std::os::unix::io::AsRawFd;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
        Err(e) => panic!("{}: {e}", path.display()),
    };
    // SAFETY: flock on a descriptor we own; closing the file releases it.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// After a daemon was SIGKILLed and reaped: waits until its state directory's daemon lock is
/// free, so that the next daemon is not refused.
///
/// Why (a product bug, see `restart_right_after_a_crash_is_never_refused` in
/// tests/failpoints.rs): the daemon spawns each shim with fork + exec; between the two, the child
/// still holds the daemon lock's descriptor (close-on-exec only closes it *at* exec, and exec of
/// the big binary can take a while on a loaded machine). When the daemon is killed in that
/// window, the orphaned child keeps the lock until its exec gets that far, and a daemon started
/// at once is refused ("another fleet daemon (pid <dead daemon>) holds the state directory").
/// Scenario tests that are about other things wait for it here; the dedicated test does not.
pub fn wait_daemon_lock_released(state_dir: &Path) {
    let lock = state_dir.join("daemon.lock");
    let deadline = std::time::Instant::now() + crate::common::DEADLINE;
    while !lock_is_free(&lock) {
        if std::time::Instant::now() > deadline {
            panic!(
                "{} still held after {:?}, by {:?}",
                lock.display(),
                crate::common::DEADLINE,
                lock_holders(&lock)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
