//! State that exists but may not be read is not an empty install. Another user, with the same
//! fleet.toml, asks about a state directory they may not read: every command says "permission
//! denied", naming what it could not read, and exits 1 — never "no runs", `[]`, "ok: nothing to
//! check" or "unknown run id". The same holds for each layer on its own: the state directory,
//! fleet.db, runs/, and a run's log.
//!
//! Tests run as root here, and root reads everything: the stranger is then `nobody`, through
//! `setpriv` (or `runuser`). Run as an ordinary user, the test takes the permission away from
//! that user instead. Only when neither is possible does it skip, saying so loudly.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// The uid and gid of the stranger when the tests run as root (`nobody`).
const NOBODY: u32 = 65534;

/// Who asks, and how a folder or file is made unreadable to them.
enum Who {
    /// The tests run as root: `fleet` runs as `nobody` through this wrapper (its words before
    /// the program), and root's own 0700 folders keep them out.
    Nobody(Vec<String>),
    /// The tests run as an ordinary user: `fleet` runs as that user, and what must be
    /// unreadable is made so for its owner (mode 000).
    Owner,
}

/// A user who may not read what the test takes away from them.
struct Stranger<'a> {
    f: &'a Fleet,
    who: Who,
    /// The `fleet` binary they run (a copy they may execute, if need be).
    bin: PathBuf,
    /// Paths made unreadable, given back their mode when the test ends (so the folder can be
    /// removed).
    shut: std::cell::RefCell<Vec<PathBuf>>,
}

impl<'a> Stranger<'a> {
    /// `None` (after a loud message) when no stranger can be had here.
    fn new(f: &'a Fleet) -> Option<Stranger<'a>> {
        let who = if rustix::process::geteuid().is_root() {
            let ids = [
                format!("--reuid={NOBODY}"),
                format!("--regid={NOBODY}"),
                "--clear-groups".to_string(),
            ];
            let setpriv: Vec<String> = std::iter::once("setpriv".to_string())
                .chain(ids)
                .chain(["--".to_string()])
                .collect();
            let runuser: Vec<String> = ["runuser", "-u", "nobody", "--"].map(String::from).to_vec();
            let works = |wrapper: &[String]| {
                Command::new(&wrapper[0])
                    .args(&wrapper[1..])
                    .arg("true")
                    .output()
                    .is_ok_and(|o| o.status.success())
            };
            if works(&setpriv) {
                Who::Nobody(setpriv)
            } else if works(&runuser) {
                Who::Nobody(runuser)
            } else {
                eprintln!(
                    "\n\n!!! SKIPPED: running as root, and neither `setpriv` nor `runuser` can run a command as nobody here: the permission tests of tests/e2e/state_dir/unreadable.rs did not run !!!\n\n"
                );
                return None;
            }
        } else {
            Who::Owner
        };
        // The stranger must reach fleet.toml and the binary: the test's folder is 0700.
        chmod(f.path(), 0o755);
        chmod(&f.config, 0o644);
        let mut bin = fleet_bin();
        if let Who::Nobody(wrapper) = &who {
            let runs = Command::new(&wrapper[0])
                .args(&wrapper[1..])
                .arg(&bin)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            if !runs {
                // Built under a folder nobody may enter: a copy in the test's folder.
                let copy = f.file("fleet-bin");
                std::fs::copy(&bin, &copy).expect("copy the fleet binary");
                chmod(&copy, 0o755);
                bin = copy;
            }
        }
        Some(Stranger {
            f,
            who,
            bin,
            shut: Default::default(),
        })
    }

    /// Makes `path` unreadable to the stranger (a folder: not even enterable).
    fn shut(&self, path: &Path) {
        match self.who {
            Who::Nobody(_) => {
                let mode = if path.is_dir() { 0o700 } else { 0o600 };
                chmod(path, mode);
            }
            Who::Owner => chmod(path, 0o000),
        }
        self.shut.borrow_mut().push(path.to_path_buf());
    }

    /// `fleet --config <fleet.toml> ARGS…` as the stranger.
    fn fleet(&self, args: &[&str]) -> Output {
        let mut c = match &self.who {
            Who::Nobody(wrapper) => {
                let mut c = Command::new(&wrapper[0]);
                c.args(&wrapper[1..]).arg(&self.bin);
                c
            }
            Who::Owner => Command::new(&self.bin),
        };
        c.arg("--config")
            .arg(&self.f.config)
            .args(args)
            .env(MARKER_VAR, &self.f.marker)
            .env_remove("FLEET_CONFIG")
            .env_remove("FAILPOINTS")
            .current_dir(self.f.path());
        run_with_deadline(c, CMD_DEADLINE)
    }

    /// Asserts `fleet ARGS…` fails with exit 1 and says "permission denied" naming `path`.
    fn assert_denied(&self, args: &[&str], path: &Path) {
        let out = self.fleet(args);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert_eq!(
            out.code(),
            Some(1),
            "fleet {args:?} as a user who may not read {}:\n{out:?}",
            path.display()
        );
        assert!(
            all.to_lowercase().contains("permission denied")
                && all.contains(&path.display().to_string()),
            "fleet {args:?} should say permission denied naming {}:\n{out:?}",
            path.display()
        );
    }
}

impl Drop for Stranger<'_> {
    fn drop(&mut self) {
        for p in self.shut.borrow().iter() {
            let mode = if p.is_dir() { 0o700 } else { 0o600 };
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
        }
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

fn fleet() -> Fleet {
    Fleet::new("[projects.p]\ncommand = [\"sh\", \"-c\", \"echo hello\"]\n")
}

/// The state directory (0700, its owner's) holds one queued run; nothing in it may be read by
/// the stranger. No command may answer as if it were empty.
#[test]
fn a_state_directory_another_user_may_not_read_is_not_empty() {
    let f = fleet();
    let id = f.enqueue("p");
    let Some(other) = Stranger::new(&f) else {
        return;
    };
    let dir = f.state_dir();
    other.shut(&dir);
    let id = id.to_string();
    for args in [
        &["runs"][..],
        &["runs", "--json"],
        &["check"],
        &["check", "--json"],
        &["logs", &id],
        &["cancel", &id],
        &["status"],
        &["status", "--json"],
        &["enqueue", "p"],
    ] {
        other.assert_denied(args, &dir);
    }
    // Nothing was changed on the stranger's behalf.
    drop(other);
    let runs = f.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(status_of(&runs[0]), "queued");
}

/// The state directory may be entered but fleet.db may not be read.
#[test]
fn a_database_another_user_may_not_read_is_not_missing() {
    let f = fleet();
    f.enqueue("p");
    let Some(other) = Stranger::new(&f) else {
        return;
    };
    chmod(&f.state_dir(), 0o755);
    let db = f.state_dir().join("fleet.db");
    other.shut(&db);
    for args in [
        &["runs"][..],
        &["runs", "--json"],
        &["check"],
        &["logs", "1"],
    ] {
        other.assert_denied(args, &db);
    }
}

/// The database may be read, but runs/ (the run folders: locks, records, logs) may not:
/// `fleet check` must not vouch for what it could not read, nor `fleet logs` print nothing.
#[test]
fn run_folders_another_user_may_not_read_fail_the_check() {
    let f = fleet();
    let id = f.enqueue("p");
    {
        let _d = f.start_daemon();
        assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    }
    assert_eq!(f.logs(id), "hello\n");
    let Some(other) = Stranger::new(&f) else {
        return;
    };
    // The database is theirs to read (and SQLite's files beside it to create).
    chmod(&f.state_dir(), 0o777);
    for entry in std::fs::read_dir(f.state_dir()).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("fleet.db") {
            chmod(&entry.path(), 0o666);
        }
    }
    let runs_dir = f.state_dir().join("runs");
    other.shut(&runs_dir);
    let out = other.fleet(&["runs", "--json"]);
    assert_eq!(
        out.code(),
        Some(0),
        "the database itself is readable: {out:?}"
    );
    assert!(out.stdout.contains("succeeded"), "{out:?}");
    other.assert_denied(&["check"], &runs_dir);
    other.assert_denied(&["check", "--json"], &runs_dir);
    other.assert_denied(&["logs", &id.to_string()], &runs_dir);
}
