//! The state directory stays private: `fleet.db` (with its write-ahead log and shared memory)
//! is made 0600 from its first byte, whatever the umask, and a `chmod 777` of the directory or
//! of `runs/` is undone by the next command that creates what is missing in it (`enqueue`) and,
//! while a daemon runs, within a prune step (30 ticks). A command that opens what exists
//! (`runs`, `cancel`) changes nothing.

use std::os::unix::fs::PermissionsExt;
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

#[test]
fn the_database_is_private_from_its_first_byte() {
    let f = Fleet::new("tick = \"100ms\"\n[projects.p]\ncommand = [\"true\"]\n");
    let id = f.enqueue("p");
    let _d = f.start_daemon();
    f.wait_terminal(id);
    let state = f.state_dir();
    for name in ["fleet.db", "fleet.db-wal", "fleet.db-shm"] {
        let path = state.join(name);
        if path.exists() {
            assert_eq!(mode(&path), 0o600, "{name}");
        }
    }
    assert!(state.join("fleet.db").exists());
}

#[test]
fn an_opened_up_state_directory_is_made_private_again() {
    let f = Fleet::new("tick = \"100ms\"\n[projects.p]\ncommand = [\"true\"]\n");
    let id = f.enqueue("p");
    let state = f.state_dir();
    let runs = state.join("runs");
    let db = state.join("fleet.db");
    // A command puts every one of them back.
    chmod(&state, 0o777);
    chmod(&db, 0o666);
    std::fs::create_dir_all(&runs).unwrap();
    chmod(&runs, 0o777);
    f.enqueue("p");
    assert_eq!(
        (mode(&state), mode(&runs), mode(&db)),
        (0o700, 0o700, 0o600)
    );
    // And a running daemon, without a restart.
    let d = f.start_daemon();
    f.wait_terminal(id);
    chmod(&state, 0o755);
    chmod(&runs, 0o777);
    chmod(&db, 0o644);
    f.wait_until(
        DEADLINE,
        "the daemon to make the state directory private",
        || (mode(&state), mode(&runs), mode(&db)) == (0o700, 0o700, 0o600),
    );
    f.wait_until(DEADLINE, "the daemon's warning", || {
        d.stderr().contains("permissions were opened up")
    });
}
