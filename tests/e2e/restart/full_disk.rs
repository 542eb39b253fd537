//! A full disk must never lose a run's real status: the state directory on a small filesystem
//! that a command's output fills; the command exits 1 with the disk full; space is freed later.
//! The `exit` record is appended to the lock file, within the block its `started` record already
//! took, so it is written at once, full disk or not, and the run ends `failed` with exit code 1
//! — not `lost` (which would be retried as if the command's fate were unknown). (A record that
//! does need room the disk lacks is retried while the shim keeps its lock: the failpoint tests
//! below.)
//!
//! A small filesystem needs a tmpfs mount, hence root (or CAP_SYS_ADMIN). Where the mount is
//! refused the test says so and passes; the failpoint tests `shim_exit_record_fails` and
//! `shim_started_record_fails` (tests/e2e/failpoints) make the same writes fail without a mount.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// A tmpfs mounted for the test's life; lazily unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` reads it) at `at`, mode 0700; `None` if the
    /// mount is refused.
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .ok()?;
        if out.status.success() {
            Some(Tmpfs(at.to_path_buf()))
        } else {
            eprintln!(
                "cannot mount a tmpfs at {}: {}",
                at.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            None
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a process of the test may still have a file open there until the fleet is
        // dropped (after this), which kills them.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_loses_no_real_status() {
    let f = Fleet::with(|dir| {
        // Waits for GO, then writes 9 MB of zeros to its output, which its shim copies to the
        // run's log (in the state directory) until the 8 MB filesystem is full, and exits 1.
        // The command itself never sees the full disk: the shim drops what it cannot write.
        format!(
            "[projects.filler]\ncommand = {}\n",
            sh(&format!(
                "while [ ! -e {go} ]; do sleep 0.05; done; head -c 9000000 /dev/zero; exit 1",
                go = shell_quote(&dir.join("GO"))
            ))
        )
    });
    let Some(_mount) = Tmpfs::mount(&f.state_dir(), "8m") else {
        eprintln!(
            "skipped: no tmpfs here (needs root); tests/e2e/failpoints shim_exit_record_fails covers \
             the same retry with an injected failure"
        );
        return;
    };
    // Room to free later: once the log has filled the rest, deleting this makes room.
    let ballast = f.state_dir().join("ballast");
    std::fs::write(&ballast, vec![1u8; 1 << 20]).unwrap();

    let d = f.start_daemon();
    let id = f.enqueue("filler");
    f.wait_status(id, "running");
    std::fs::write(f.file("GO"), "").unwrap();

    // The command filled the disk and exited. Its exit record is a line appended to the lock
    // file, inside the block that file was given for `started`: it needs no room the full disk
    // no longer has, so it is written at once.
    f.wait_until(DEADLINE, "the shim's exit record, on the full disk", || {
        has_record(&f, id, "exit")
    });
    let probe = std::fs::write(f.state_dir().join("probe"), vec![0u8; 64 << 10]);
    assert_eq!(
        probe.map_err(|e| e.raw_os_error()),
        Err(Some(libc::ENOSPC)),
        "the disk must be full while the record is written"
    );
    let exit = run_records(&f, id).exit.unwrap();
    assert_eq!(exit.code, Some(1), "the command's real status: {exit:?}");

    // Room for the database to record the end.
    std::fs::remove_file(&ballast).unwrap();
    let _ = std::fs::remove_file(f.state_dir().join("probe"));
    let r = f.wait_terminal(id);
    assert_eq!(
        status_of(&r),
        "failed",
        "the command's real status, not lost: {r}\n{}",
        d.stderr()
    );
    assert_eq!(r["exit_code"], 1, "{r}");
    assert_eq!(r["attempt"], 1, "{r}");
    assert_eq!(f.runs().len(), 1, "no retry: {:#?}", f.runs());
    // The log filled the disk; truncate it so `fleet check` and the cleanup have room.
    std::fs::write(log_path(&f, id), "").unwrap();
    assert_check_ok(&f);
}
