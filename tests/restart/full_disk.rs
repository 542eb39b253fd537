//! A full disk must delay a run's record, never lose it: the state directory on a small
//! filesystem that a command's output fills; the command exits 1 while no record can be
//! written; space is freed later. The shim keeps its lock and retries its `exit` record until it
//! is on disk, so the run ends `failed` with exit code 1 — not `lost` (which would be retried as
//! if the command's fate were unknown).
//!
//! A small filesystem needs a tmpfs mount, hence root (or CAP_SYS_ADMIN). Where the mount is
//! refused the test says so and passes; the failpoint tests `shim_exit_record_fails` and
//! `shim_started_record_fails` (tests/failpoints) make the same writes fail without a mount.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use crate::helpers::*;

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
fn full_disk_delays_the_exit_record_and_the_real_status_survives() {
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
            "skipped: no tmpfs here (needs root); tests/failpoints shim_exit_record_fails covers \
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

    // The command filled the disk and exited; its shim cannot write the exit record.
    f.wait_until(
        DEADLINE,
        "the shim to fail to write its exit record on the full disk",
        || d.stderr().contains("could not write the exit record"),
    );
    let r = f.run(id);
    assert_eq!(
        status_of(&r),
        "running",
        "while its exit record waits for room, the run is still running: {r}\n{}",
        d.stderr()
    );
    assert!(
        !has_record(&f, id, "exit"),
        "the exit record cannot have been written"
    );

    std::fs::remove_file(&ballast).unwrap();
    let r = f.wait_terminal(id);
    assert_eq!(
        status_of(&r),
        "failed",
        "the command's real status, not lost: {r}\n{}",
        d.stderr()
    );
    assert_eq!(r["exit_code"], 1, "{r}");
    assert_eq!(r["attempt"], 1, "{r}");
    assert!(has_record(&f, id, "exit"));
    assert!(
        d.stderr().contains("the exit record is written, after"),
        "the shim should say it wrote the record in the end:\n{}",
        d.stderr()
    );
    assert_eq!(f.runs().len(), 1, "no retry: {:#?}", f.runs());
    // The log filled the disk; truncate it so `fleet check` and the cleanup have room.
    std::fs::write(
        f.state_dir().join("runs").join(id.to_string()).join("log"),
        "",
    )
    .unwrap();
    assert_check_ok(&f);
}
