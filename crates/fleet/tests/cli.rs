//! Command-line surface tests on the real binary. (Their presence also makes `cargo test` and
//! `cargo nextest` build `target/<profile>/fleet`, which the end-to-end tests in the workspace
//! root's tests/ drive.)

use std::process::Command;

fn fleet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fleet"))
}

#[test]
fn unknown_subcommand_is_usage_error() {
    let out = fleet().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn missing_config_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.toml");
    let out = fleet()
        .args(["--config", path.to_str().unwrap(), "validate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope.toml"), "{err}");
}

#[test]
fn bad_shim_arguments_do_not_panic() {
    let out = fleet().args(["shim", "--bogus"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}
