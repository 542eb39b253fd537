//! The state directory is its owner's alone, and fleet changes the mode of nothing it did not
//! create. fleet makes its folders 0700 and its files 0600 from their first byte, whatever the
//! umask, and never changes a mode afterwards. A state directory (or its `runs/`) that group or
//! others may write into — a shared folder named by mistake, or one opened up since — is
//! refused by the daemon and by every command that writes, with a message saying why and what
//! to do; a command that only reads shows what is there, with a warning; a running daemon says
//! so in its log. Never re-permissioned, by any of them.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::common::*;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

/// Asserts that `out` is a refusal (exit 2) naming `folder`, its mode `shown` and what to do.
fn assert_refused(out: &Output, folder: &Path, shown: &str, what: &str) {
    assert_eq!(out.code(), Some(2), "{what}: {out:?}");
    let line = out.stderr.lines().next().unwrap_or("");
    assert!(
        line.contains(&folder.display().to_string())
            && line.contains(&format!("mode {shown}"))
            && line.contains("may write into it")
            && line.contains("chmod go-w"),
        "{what} must say which folder, why and what to do: {out:?}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "one line: {out:?}");
}

/// Asserts that `out` succeeded and warned about `folder` and its mode `shown`.
fn assert_warned(out: &Output, folder: &Path, shown: &str, what: &str) {
    assert_eq!(out.code(), Some(0), "{what}: {out:?}");
    assert!(
        out.stderr.contains("fleet: warning: state directory")
            && out.stderr.contains(&folder.display().to_string())
            && out.stderr.contains(&format!("mode {shown}")),
        "{what} must warn: {out:?}"
    );
}

#[test]
fn what_fleet_creates_is_private_from_its_first_byte() {
    let f = Fleet::new("tick = \"100ms\"\n[projects.p]\ncommand = [\"echo\", \"hi\"]\n");
    let id = f.enqueue("p");
    let _d = f.start_daemon();
    f.wait_terminal(id);
    let state = f.state_dir();
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("runs")), 0o700);
    for name in names(&state) {
        let path = state.join(&name);
        if path.is_file() && name != "daemon.sock" {
            assert_eq!(mode(&path), 0o600, "{name}");
        }
    }
    for name in names(&state.join("runs")) {
        assert_eq!(mode(&state.join("runs").join(&name)), 0o600, "runs/{name}");
    }
    assert!(state.join("fleet.db").exists());
}

/// `state_dir` names an existing folder of mode 1777 holding other users' files, as `/tmp`
/// does: nothing re-permissions it, a read shows what is there with a warning, and a write or
/// the daemon is refused with a message that says why and what to do.
#[test]
fn a_folder_others_may_write_into_is_refused_never_re_permissioned() {
    let f = Fleet::with(|dir| {
        format!(
            "state_dir = {}\ntick = \"100ms\"\n[projects.p]\ncommand = [\"true\"]\n",
            toml_str(&dir.join("shared").display().to_string())
        )
    });
    let shared = f.file("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    let theirs = shared.join("another-users-file");
    std::fs::write(&theirs, "theirs\n").unwrap();
    chmod(&theirs, 0o644);
    if rustix::process::geteuid().is_root() {
        // Another user's file, as in /tmp (nobody).
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    }
    let owner = std::fs::metadata(&theirs).unwrap().uid();

    let out = f.cmd(&["runs", "--json"]);
    assert_eq!(
        format!("{:04o}", mode(&shared)),
        "1777",
        "fleet runs, a command that only reads, re-permissioned the folder"
    );
    assert_warned(&out, &shared, "1777", "fleet runs");
    assert_eq!(out.stdout.trim(), "[]", "{out:?}");
    let out = f.cmd(&["status", "--json"]);
    assert_eq!(out.code(), Some(3), "{out:?}");
    assert_eq!(
        mode(&shared),
        0o1777,
        "fleet status re-permissioned the folder"
    );

    let out = f.cmd(&["enqueue", "p"]);
    assert_refused(&out, &shared, "1777", "fleet enqueue");
    assert!(out.stdout.is_empty(), "no run id: {out:?}");

    let mut d = f.spawn_daemon(&[]);
    f.wait_until(DEADLINE, "the daemon to refuse the folder", || {
        d.try_exit().is_some()
    });
    let st = d.try_exit().unwrap();
    assert_eq!(st.code(), Some(2), "{}", d.stderr());
    assert!(
        d.stderr().contains(&format!(
            "{}: its group and other users may write into it (mode 1777)",
            shared.display()
        )),
        "{}",
        d.stderr()
    );

    assert_eq!(mode(&shared), 0o1777, "the folder is as it was");
    assert_eq!(
        names(&shared),
        ["another-users-file"],
        "nothing created in it"
    );
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "theirs\n");
    assert_eq!(mode(&theirs), 0o644);
    assert_eq!(std::fs::metadata(&theirs).unwrap().uid(), owner);
}

/// The same folder reached through a symbolic link (`state_dir` names the link): refused all the
/// same, since fleet's files would land in the folder the link points to.
#[test]
fn a_link_to_a_folder_others_may_write_into_is_refused() {
    let f = Fleet::with(|dir| {
        format!(
            "state_dir = {}\n[projects.p]\ncommand = [\"true\"]\n",
            toml_str(&dir.join("link").display().to_string())
        )
    });
    let shared = f.file("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    std::os::unix::fs::symlink(&shared, f.file("link")).unwrap();
    let out = f.cmd(&["enqueue", "p"]);
    assert_refused(
        &out,
        &f.file("link"),
        "1777",
        "fleet enqueue through a link",
    );
    let out = f.cmd(&["daemon"]);
    assert_eq!(out.code(), Some(2), "{out:?}");
    assert!(out.stderr.contains("mode 1777"), "{out:?}");
    assert_eq!(mode(&shared), 0o1777, "the folder is as it was");
    assert!(
        names(&shared).is_empty(),
        "nothing created in it: {:?}",
        names(&shared)
    );
}

/// A folder others may read but not write (0755) is used as it is: nothing of fleet's in it is
/// theirs to read, and its mode is not fleet's to change.
#[test]
fn a_folder_others_may_only_read_is_used_as_it_is() {
    let f = Fleet::new("[projects.p]\ncommand = [\"true\"]\n");
    std::fs::create_dir(f.state_dir()).unwrap();
    chmod(&f.state_dir(), 0o755);
    f.enqueue("p");
    assert_eq!(mode(&f.state_dir()), 0o755);
    assert_eq!(mode(&f.state_dir().join("fleet.db")), 0o600);
    let out = f.cmd(&["runs"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "no warning: {out:?}");
}

/// The state directory fleet made, opened up since (`chmod 777`, or `runs/` made
/// group-writable): refused by the commands that write, read with a warning, said by a running
/// daemon in its log — and left as the operator made it.
#[test]
fn an_opened_up_state_directory_is_refused_and_left_as_it_is() {
    let f = Fleet::new("tick = \"100ms\"\n[projects.p]\ncommand = [\"echo\", \"hi\"]\n");
    let id = f.enqueue("p");
    let state = f.state_dir();
    let runs = state.join("runs");
    let db = state.join("fleet.db");

    chmod(&state, 0o777);
    for args in [
        &["enqueue", "p"][..],
        &["cancel", &id.to_string()],
        &["prune"],
    ] {
        assert_refused(&f.cmd(args), &state, "0777", &format!("fleet {args:?}"));
    }
    for args in [&["runs"][..], &["check"], &["prune", "--dry-run"]] {
        assert_warned(&f.cmd(args), &state, "0777", &format!("fleet {args:?}"));
    }
    assert_eq!(mode(&state), 0o777, "left as the operator made it");

    chmod(&state, 0o700);
    std::fs::create_dir_all(&runs).unwrap();
    chmod(&runs, 0o770);
    assert_refused(&f.cmd(&["enqueue", "p"]), &runs, "0770", "fleet enqueue");
    assert_warned(&f.cmd(&["runs"]), &runs, "0770", "fleet runs");
    assert_eq!(mode(&runs), 0o770);
    let mut d = f.spawn_daemon(&[]);
    f.wait_until(DEADLINE, "the daemon to refuse runs/", || {
        d.try_exit().is_some()
    });
    assert_eq!(d.try_exit().unwrap().code(), Some(2), "{}", d.stderr());
    assert!(
        d.stderr()
            .contains("its group may write into it (mode 0770)"),
        "{}",
        d.stderr()
    );
    assert_eq!(mode(&runs), 0o770);
    chmod(&runs, 0o700);

    // A running daemon says so when it finds its state directory opened up, and again when it
    // is private again; it changes nothing.
    let d = f.start_daemon();
    assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    chmod(&state, 0o757);
    f.wait_until(DEADLINE, "the daemon's warning", || {
        d.stderr()
            .contains("the state directory was opened up to other users")
    });
    assert_eq!(mode(&state), 0o757);
    chmod(&state, 0o700);
    f.wait_until(DEADLINE, "the daemon to see it private again", || {
        d.stderr()
            .contains("the state directory is its owner's alone again")
    });
    // Nor does it touch a file's mode: fleet.db opened up in a private folder is out of
    // others' reach, and stays as the operator made it.
    chmod(&db, 0o666);
    let id = f.enqueue("p");
    assert_eq!(status_of(&f.wait_terminal(id)), "succeeded");
    assert_eq!(mode(&db), 0o666);
    assert_eq!(
        d.stderr()
            .matches("the state directory was opened up")
            .count(),
        1,
        "said once: {}",
        d.stderr()
    );
}
