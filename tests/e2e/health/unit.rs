//! dist/fleet.service: `systemd-analyze verify` accepts it (where systemd is installed; the test
//! says loudly when it cannot run), and what it promises holds against the real binary: the exit
//! status it will not restart on is the one an invalid config gives.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

fn unit_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/fleet.service")
}

fn unit() -> String {
    std::fs::read_to_string(unit_path()).expect("dist/fleet.service")
}

/// Where `systemd-analyze` is, if installed.
fn systemd_analyze() -> Option<PathBuf> {
    ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// `systemd-analyze verify` on the shipped unit, its `ExecStart` binary pointed at the one under
/// test (verify checks that the program exists); any complaint fails, since verify exits 0 even
/// for a setting it ignores.
#[test]
fn systemd_analyze_verifies_the_unit() {
    let Some(analyze) = systemd_analyze() else {
        eprintln!("SKIPPED: systemd-analyze is not installed; dist/fleet.service was NOT verified");
        return;
    };
    let f = Fleet::new("");
    let text = unit();
    let exec = unit_value(&text, "ExecStart").expect("ExecStart");
    let program = exec.split_whitespace().next().unwrap();
    let copy = f.file("fleet.service");
    std::fs::write(
        &copy,
        text.replace(program, &fleet_bin().display().to_string()),
    )
    .unwrap();
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("run systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stderr.trim().is_empty() && stdout.trim().is_empty(),
        "systemd-analyze verify: {}\n{stdout}{stderr}",
        out.status
    );
}

/// The settings the daemon relies on, and the config-error exit status checked against the real
/// `fleet daemon`.
#[test]
fn the_unit_says_what_the_daemon_relies_on() {
    let text = unit();
    for (key, want) in [
        ("Type", "notify"),
        ("KillMode", "process"),
        ("StateDirectory", "fleet"),
        ("StateDirectoryMode", "0700"),
        ("Restart", "on-failure"),
        ("User", "fleet"),
    ] {
        assert_eq!(unit_value(&text, key), Some(want), "{key}");
    }
    assert!(unit_value(&text, "WatchdogSec").is_some(), "WatchdogSec");
    let no_restart: i32 = unit_value(&text, "RestartPreventExitStatus")
        .expect("RestartPreventExitStatus")
        .parse()
        .unwrap();
    let f = Fleet::new("[projects.p]\ncommand = []\n");
    let out = f.cmd(&["daemon"]);
    assert_eq!(
        out.code(),
        Some(no_restart),
        "an invalid config must exit with the status the unit does not restart on: {out:?}"
    );
}
